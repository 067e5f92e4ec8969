package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawner starts children from one OS thread that lives as long as the
// node: Pdeathsig fires when the forking *thread* exits (see the member
// harness's spawner).
type spawner struct {
	mu     sync.Mutex
	closed bool
	reqs   chan func()
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("node: stopped")
	}
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

func (s *spawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.reqs)
	}
}

type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func (n *Node) startProcess(name, bin string, args []string) (*process, error) {
	logPath := n.path("logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.spawner.start(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("node: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	n.logf("%s started (pid %d)", name, cmd.Process.Pid)
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// rmdirRetry removes a cgroup directory; the kernel refuses while the
// killed processes in it are being reaped.
func rmdirRetry(d string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the kernel gives no event for "cgroup empty" on v1
	}
	return fmt.Errorf("rmdir %s: %w", d, err)
}
