package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/natsserver"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Fleetview is one in-process `fleetview up`.
type Fleetview struct {
	Opts       app.UpOptions
	cancel     context.CancelFunc
	done       chan error
	Conn       *grpc.ClientConn
	Query      fleetviewv1.QueryServiceClient
	Clusters   fleetviewv1.ClusterServiceClient
	Registries fleetviewv1.RegistryServiceClient
	REST       string
}

// FreeAddr is a free loopback address for a listener (harness.FreeAddr:
// outside the ports outgoing connections take).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreePort is a free loopback address and its port, for listeners (like
// the embedded NATS server) configured by host and port.
func FreePort(t testing.TB) (string, int) {
	t.Helper()
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return addr, n
}

// RepoPath is elems joined under the repository's root (the directory that
// holds go.mod), found by walking up from the test's working directory, so
// a path means the same whatever the depth of the package that uses it.
func RepoPath(t testing.TB, elems ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(append([]string{dir}, elems...)...)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}

func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("FLEETVIEW_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// UpOptions prepares `fleetview up` for the given member clusters.
func UpOptions(t testing.TB, fleet *harness.Fleet, stateDir string) app.UpOptions {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	var contexts []string
	for _, c := range fleet.Clusters() {
		contexts = append(contexts, c.Name)
	}
	_, natsPort, _ := net.SplitHostPort(FreeAddr(t))
	port, _ := strconv.Atoi(natsPort)
	return app.UpOptions{
		ServeOptions: app.ServeOptions{StateDir: stateDir, GRPCAddr: FreeAddr(t), HTTPAddr: FreeAddr(t)},
		Kubeconfig:   kc, Contexts: contexts, NATSPort: port,
	}
}

func StartUp(t testing.TB, o app.UpOptions) *Fleetview {
	t.Helper()
	return StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), context.Background())
}

// StartUpWith dials with creds and probes readiness with probeCtx (which
// carries credentials when the API requires them).
func StartUpWith(t testing.TB, o app.UpOptions, creds grpc.DialOption, probeCtx context.Context) *Fleetview {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fv := &Fleetview{Opts: o, cancel: cancel, done: make(chan error, 1), REST: "http://" + o.HTTPAddr}
	go func() { fv.done <- app.RunUp(ctx, o, Logger(t)) }()
	conn, err := grpc.NewClient(o.GRPCAddr, creds)
	if err != nil {
		t.Fatal(err)
	}
	fv.Conn = conn
	fv.Query = fleetviewv1.NewQueryServiceClient(conn)
	fv.Clusters = fleetviewv1.NewClusterServiceClient(conn)
	fv.Registries = fleetviewv1.NewRegistryServiceClient(conn)
	Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-fv.done:
			t.Fatalf("fleetview up exited early: %v", err)
		default:
		}
		_, err := fv.Registries.ListRegistries(probeCtx, &fleetviewv1.ListRegistriesRequest{})
		return err
	})
	return fv
}

// Stop shuts fleetview down the way Ctrl-C does and checks it exits cleanly.
func (fv *Fleetview) Stop(t testing.TB) {
	t.Helper()
	fv.cancel()
	_ = fv.Conn.Close()
	select {
	case err := <-fv.done:
		if err != nil {
			t.Fatalf("fleetview up returned %v on shutdown", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fleetview up did not shut down within 60s")
	}
}

// Eventually retries f until it succeeds; the last error explains a timeout.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ApplyFile applies a registry YAML file verbatim through the gRPC API.
func (fv *Fleetview) ApplyFile(t testing.TB, path string) {
	t.Helper()
	y, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(j, s); err != nil {
		t.Fatal(err)
	}
	if _, err := fv.Registries.ApplyRegistry(context.Background(), &fleetviewv1.ApplyRegistryRequest{Registry: s}); err != nil {
		t.Fatalf("apply %s: %v", path, err)
	}
}

// RESTGet fetches path from the REST gateway and decodes JSON into out.
func (fv *Fleetview) RESTGet(path string, out any) (int, error) {
	resp, err := http.Get(fv.REST + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	return resp.StatusCode, json.Unmarshal(body, out)
}

// ClusterCredential connects to a hub's embedded NATS server as one member
// cluster's collector would (its user, its inbox prefix, the hub's
// JetStream API prefix), closed when the test ends.
func ClusterCredential(t testing.TB, url, cluster, pass string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(cluster, pass), nats.CustomInboxPrefix(natsserver.InboxPrefix(cluster)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.NewWithAPIPrefix(nc, natsserver.APIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// BuildFleetview builds the real binary once per test.
func BuildFleetview(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetview")
	out, err := exec.Command("go", "build", "-o", bin, RepoPath(t, "cmd", "fleetview")).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var Members = []string{"member1", "member2", "member3"}

func StartFleet(t *testing.T, names ...string) *harness.Fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var logw *os.File
	if os.Getenv("FLEETVIEW_TEST_VERBOSE") != "" {
		logw = os.Stderr
	}
	opts := harness.Options{Clusters: names}
	if logw != nil {
		opts.LogWriter = logw
	}
	fleet, err := harness.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start member clusters: %v", err)
	}
	t.Cleanup(func() {
		if err := fleet.Stop(); err != nil {
			t.Errorf("stop member clusters: %v", err)
		}
	})
	for _, c := range fleet.Clusters() {
		if err := c.GrantCollectorReadAll(ctx); err != nil {
			t.Fatalf("grant collector RBAC in %s: %v", c.Name, err)
		}
	}
	return fleet
}

func EnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// RESTStatus fetches path and decodes a Kubernetes Status body.
func (fv *Fleetview) RESTStatus(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(fv.REST + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, body
}
