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

func startUpProc(t testing.TB, bin string, args []string, logw io.Writer) *proc {
	t.Helper()
	return startProc(t, bin, append([]string{"up"}, args...), logw)
}

// serveProc is a `fleetview serve` child process.
type serveProc struct {
	*proc
	metrics string
	grpc    string
	http    string
}

func startServe(t *testing.T, bin, natsURL, stateDir string, logw *os.File) *serveProc {
	t.Helper()
	p := &serveProc{metrics: freeAddr(t), grpc: freeAddr(t), http: freeAddr(t)}
	p.proc = startProc(t, bin, []string{"serve", "--nats-url", natsURL, "--state-dir", stateDir,
		"--grpc-addr", p.grpc, "--http-addr", p.http, "--metrics-addr", p.metrics}, logw)
	return p
}

// applied reads the badger materializer's applied sequences from /metrics.
func (p *serveProc) applied() (map[string]uint64, error) {
	fams, err := scrape(p.metrics)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, m := range series(fams, "fleetview_materializer_applied_sequence", map[string]string{"materializer": "badger"}) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cluster" {
				out[l.GetValue()] = uint64(m.GetGauge().GetValue())
			}
		}
	}
	return out, nil
}

func (p *serveProc) appliedOrEmpty() map[string]uint64 {
	a, err := p.applied()
	if err != nil {
		return map[string]uint64{}
	}
	return a
}
