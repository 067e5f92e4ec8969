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

// Proc is a fleetview subcommand run as a child process of the real
// binary, which tests kill, stop and restart.
type Proc struct {
	name   string // the subcommand, for messages
	cmd    *exec.Cmd
	exited chan error
}

func StartProc(t testing.TB, bin string, args []string, logw io.Writer) *Proc {
	t.Helper()
	p := &Proc{name: "fleetview " + args[0], exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logw, logw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// Kill9 sends SIGKILL: nothing is flushed, nothing is marked.
func (p *Proc) Kill9(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// Stop sends SIGTERM and requires a clean exit within a minute.
func (p *Proc) Stop(t testing.TB) {
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

// Running fails the test if the process has exited.
func (p *Proc) Running(t testing.TB) {
	t.Helper()
	select {
	case err := <-p.exited:
		t.Fatalf("%s exited early: %v", p.name, err)
	default:
	}
}

// ProcessLog is a file for child processes' output, whose tail the test
// logs if it fails; closed when the test ends.
func ProcessLog(t testing.TB, name string) *os.File {
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

func StartUpProc(t testing.TB, bin string, args []string, logw io.Writer) *Proc {
	t.Helper()
	return StartProc(t, bin, append([]string{"up"}, args...), logw)
}

// ServeProc is a `fleetview serve` child process.
type ServeProc struct {
	*Proc
	metrics string
	GRPC    string
	HTTP    string
}

func StartServe(t *testing.T, bin, natsURL, stateDir string, logw *os.File) *ServeProc {
	t.Helper()
	p := &ServeProc{metrics: FreeAddr(t), GRPC: FreeAddr(t), HTTP: FreeAddr(t)}
	p.Proc = StartProc(t, bin, []string{"serve", "--nats-url", natsURL, "--state-dir", stateDir,
		"--grpc-addr", p.GRPC, "--http-addr", p.HTTP, "--metrics-addr", p.metrics}, logw)
	return p
}

// applied reads the badger materializer's applied sequences from /metrics.
func (p *ServeProc) applied() (map[string]uint64, error) {
	fams, err := Scrape(p.metrics)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, m := range Series(fams, "fleetview_materializer_applied_sequence", map[string]string{"materializer": "badger"}) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cluster" {
				out[l.GetValue()] = uint64(m.GetGauge().GetValue())
			}
		}
	}
	return out, nil
}

func (p *ServeProc) AppliedOrEmpty() map[string]uint64 {
	a, err := p.applied()
	if err != nil {
		return map[string]uint64{}
	}
	return a
}
