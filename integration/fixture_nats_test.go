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

// natsEnv is an embedded NATS server on a fixed port and store dir, so it
// can be shut down and started again as the same server.
type natsEnv struct {
	t          *testing.T
	dir        string
	port       int
	srv        *natsserver.Server
	raw        *server.Server // with a non-default max payload
	maxPayload int32
	nc         *nats.Conn
	js         jetstream.JetStream
	regs       *regstore.Store
	inv        jetstream.KeyValue
	url        string
	mu         sync.Mutex
	alive      bool
}

func startNATS(t *testing.T) *natsEnv { return startNATSWith(t, 0) }

// startNATSWith starts a server whose max payload is maxPayload (0: the
// fleetview default, stream.MaxPayload).
func startNATSWith(t *testing.T, maxPayload int32) *natsEnv {
	t.Helper()
	_, p, _ := net.SplitHostPort(freeAddr(t))
	port, _ := strconv.Atoi(p)
	e := &natsEnv{t: t, dir: t.TempDir(), port: port, maxPayload: maxPayload}
	e.start()
	nc, err := nats.Connect(e.url, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.nc = nc
	e.js, _ = jetstream.New(nc)
	ctx := context.Background()
	if e.regs, err = regstore.Open(ctx, e.js, 1); err != nil {
		t.Fatal(err)
	}
	if e.inv, err = inventory.Bucket(ctx, e.js, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		e.stop()
	})
	return e
}

func (e *natsEnv) start() {
	e.t.Helper()
	e.url = fmt.Sprintf("nats://127.0.0.1:%d", e.port)
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

func (e *natsEnv) stop() {
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

// apply stores a registry the way the query API does.
func (e *natsEnv) apply(t *testing.T, r *registry.ResourceRegistry) {
	t.Helper()
	r.APIVersion, r.Kind = registry.APIVersion, registry.Kind
	if _, err := e.regs.Apply(context.Background(), r); err != nil {
		t.Fatalf("apply registry %s: %v", r.Name, err)
	}
}

// collectorProc is a `fleetview collector` child process.
type collectorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

type collectorEnv struct {
	bin, kubeconfig, context string
}

func (ce collectorEnv) start(t *testing.T, cluster, natsURL string, extra ...string) *collectorProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), cluster+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"collector", "--cluster", cluster, "--kubeconfig", ce.kubeconfig, "--context", ce.context,
		"--nats-url", natsURL, "--heartbeat", "1s", "--api-recheck-interval", "2s"}, extra...)
	cmd := exec.Command(ce.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &collectorProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL: nothing is flushed, nothing is marked.
func (p *collectorProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *collectorProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *collectorProc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// lastControl returns the last control event of a resource and its sequence.
func lastControl(ctx context.Context, js jetstream.JetStream, cluster string, gvr schema.GroupVersionResource) (fleetviewv1.EventType, uint64, error) {
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

// member1PodsToNATS starts a NATS server whose registry caches member1's
// Pods, and member1's collector process (binary bin) feeding it.
func member1PodsToNATS(t *testing.T, fleet *harness.Fleet, bin string) *natsEnv {
	t.Helper()
	ne := startNATS(t)
	ne.apply(t, registryFor("pods", []string{"member1"}, registry.ResourceSelector{APIVersion: "v1", Kind: "Pod"}))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	collectorEnv{bin: bin, kubeconfig: kc, context: "member1"}.start(t, "member1", ne.url)
	return ne
}
