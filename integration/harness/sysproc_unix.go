//go:build unix && !linux

package harness

import "syscall"

// sysProcAttr puts the child in its own process group. Only Linux can have
// children killed automatically when the parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
