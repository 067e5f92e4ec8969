//go:build !linux

package badger

import "log/slog"

// startRecycler is Linux-only (recycle_linux.go): elsewhere the value log's
// pages are left to the kernel.
func startRecycler(string, *slog.Logger) (stop func()) { return func() {} }
