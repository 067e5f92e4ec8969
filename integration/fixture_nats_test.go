package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NATSEnv is an embedded NATS server on a fixed port and store dir, so it
// can be shut down and started again as the same server.
type NATSEnv struct {
	t          *testing.T
	dir        string
	port       int
	srv        *natsserver.Server
	raw        *server.Server // with a non-default max payload
	maxPayload int32
	nc         *nats.Conn
	JS         jetstream.JetStream
	Registries *regstore.Store
	Inv        jetstream.KeyValue
	URL        string
	mu         sync.Mutex
	alive      bool
}

func StartNATS(t *testing.T) *NATSEnv { return StartNATSWith(t, 0) }

// StartNATSWith starts a server whose max payload is maxPayload (0: the
// fleetview default, stream.MaxPayload).
func StartNATSWith(t *testing.T, maxPayload int32) *NATSEnv {
	t.Helper()
	_, p, _ := net.SplitHostPort(FreeAddr(t))
	port, _ := strconv.Atoi(p)
	e := &NATSEnv{t: t, dir: t.TempDir(), port: port, maxPayload: maxPayload}
	e.Start()
	nc, err := nats.Connect(e.URL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.nc = nc
	e.JS, _ = jetstream.New(nc)
	ctx := context.Background()
	if e.Registries, err = regstore.Open(ctx, e.JS, 1); err != nil {
		t.Fatal(err)
	}
	if e.Inv, err = inventory.Bucket(ctx, e.JS, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		e.Stop()
	})
	return e
}

func (e *NATSEnv) Start() {
	e.t.Helper()
	e.URL = fmt.Sprintf("nats://127.0.0.1:%d", e.port)
	if e.maxPayload > 0 {
		raw, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: e.port, JetStream: true, StoreDir: e.dir, MaxPayload: e.maxPayload, NoSigs: true})
		if err != nil {
			e.t.Fatal(err)
		}
		go raw.Start()
		if !raw.ReadyForConnections(30 * time.Second) {
			e.t.Fatal("NATS not ready")
		}
		e.mu.Lock()
		e.raw, e.alive = raw, true
		e.mu.Unlock()
		return
	}
	srv, err := natsserver.Start(natsserver.Options{StoreDir: e.dir, Port: e.port, ServerName: "collector-test"})
	if err != nil {
		e.t.Fatalf("start NATS: %v", err)
	}
	e.mu.Lock()
	e.srv, e.alive = srv, true
	e.mu.Unlock()
}

func (e *NATSEnv) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.alive && e.raw != nil {
		e.raw.Shutdown()
		e.raw.WaitForShutdown()
	} else if e.alive {
		e.srv.Shutdown()
	}
	e.alive = false
}

// Apply stores a registry the way the query API does.
func (e *NATSEnv) Apply(t *testing.T, r *registry.ResourceRegistry) {
	t.Helper()
	r.APIVersion, r.Kind = registry.APIVersion, registry.Kind
	if _, err := e.Registries.Apply(context.Background(), r); err != nil {
		t.Fatalf("apply registry %s: %v", r.Name, err)
	}
}

// CollectorProc is a `fleetview collector` child process.
type CollectorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

type CollectorEnv struct {
	Bin, Kubeconfig, Context string
}

func (ce CollectorEnv) Start(t *testing.T, cluster, natsURL string, extra ...string) *CollectorProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), cluster+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"collector", "--cluster", cluster, "--kubeconfig", ce.Kubeconfig, "--context", ce.Context,
		"--nats-url", natsURL, "--heartbeat", "1s", "--api-recheck-interval", "2s"}, extra...)
	cmd := exec.Command(ce.Bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &CollectorProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Kill sends SIGKILL: nothing is flushed, nothing is marked.
func (p *CollectorProc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *CollectorProc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *CollectorProc) Tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// LastControl returns the last control event of a resource and its sequence.
func LastControl(ctx context.Context, js jetstream.JetStream, cluster string, gvr schema.GroupVersionResource) (fleetviewv1.EventType, uint64, error) {
	s, err := js.Stream(ctx, stream.StreamName(cluster))
	if err != nil {
		return 0, 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, stream.ControlSubject(cluster, gvr))
	if err != nil {
		return 0, 0, err
	}
	ev, err := stream.Decode(m.Subject, m.Data)
	if err != nil {
		return 0, 0, err
	}
	return ev.GetType(), m.Sequence, nil
}

// Member1PodsToNATS starts a NATS server whose registry caches member1's
// Pods, and member1's collector process (binary bin) feeding it.
func Member1PodsToNATS(t *testing.T, fleet *harness.Fleet, bin string) *NATSEnv {
	t.Helper()
	ne := StartNATS(t)
	ne.Apply(t, RegistryFor("pods", []string{"member1"}, registry.ResourceSelector{APIVersion: "v1", Kind: "Pod"}))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	CollectorEnv{Bin: bin, Kubeconfig: kc, Context: "member1"}.Start(t, "member1", ne.URL)
	return ne
}
