package harness

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel send
// it SIGKILL when the thread that started it (see spawner) dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
