//go:build !linux

package badger

import (
	"context"
	"log/slog"
)

// runRecycler is Linux-only (recycle_linux.go): elsewhere the value log's
// pages are left to the kernel.
func runRecycler(context.Context, string, *slog.Logger) {}
