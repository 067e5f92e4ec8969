package integration

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// proc is a fleetview subcommand run as a child process of the real
// binary, which tests kill, stop and restart.
type proc struct {
	name   string // the subcommand, for messages
	cmd    *exec.Cmd
	exited chan error
}

func startProc(t testing.TB, bin string, args []string, logw io.Writer) *proc {
	t.Helper()
	p := &proc{name: "fleetview " + args[0], exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logw, logw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// kill9 sends SIGKILL: nothing is flushed, nothing is marked.
func (p *proc) kill9(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// stop sends SIGTERM and requires a clean exit within a minute.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("%s exited with %v on SIGTERM", p.name, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop within 60s of SIGTERM", p.name)
	}
}

// running fails the test if the process has exited.
func (p *proc) running(t testing.TB) {
	t.Helper()
	select {
	case err := <-p.exited:
		t.Fatalf("%s exited early: %v", p.name, err)
	default:
	}
}

// processLog is a file for child processes' output, whose tail the test
// logs if it fails; closed when the test ends.
func processLog(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(f.Name())
			if len(b) > 12000 {
				b = b[len(b)-12000:]
			}
			t.Logf("fleetview output (tail):\n%s", b)
		}
		f.Close()
	})
	return f
}
