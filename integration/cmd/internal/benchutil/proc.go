package benchutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Proc is one fleetview process a benchmark runs (a hub or a collector),
// its output appended to a log file.
type Proc struct {
	Cmd    *exec.Cmd
	Log    string
	exited chan struct{}
}

// StartProc runs bin with args, env added to this process's environment,
// its output appended to log (a restart's after the last run's).
func StartProc(bin, log string, env []string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	p := &Proc{Cmd: exec.Command(bin, args...), Log: log, exited: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = f, f
	if err := p.Cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = p.Cmd.Wait(); f.Close(); close(p.exited) }()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Alive is nil while the process runs; after it exited, an error that
// ends a WaitFor at once, naming the process what.
func (p *Proc) Alive(what string) error {
	select {
	case <-p.exited:
		return fmt.Errorf("%w: the %s exited (log %s)", ErrStop, what, p.Log)
	default:
		return nil
	}
}

// Terminate sends SIGTERM (nothing if the process has exited).
func (p *Proc) Terminate() error {
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Wait waits up to timeout for the process to exit; then it kills it
// and says so.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		_ = p.Cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("the process did not stop within %s of SIGTERM (log %s)", timeout, p.Log)
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit; a
// nil Proc is stopped.
func (p *Proc) Stop(timeout time.Duration) error {
	if p == nil {
		return nil
	}
	if err := p.Terminate(); err != nil {
		return err
	}
	return p.Wait(timeout)
}
