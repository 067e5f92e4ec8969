package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/opensearch"
)

// metricsPage reads serve's Prometheus text page.
func metricsPage(addr string) ([]byte, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// metricValue reads one materializer's sample from /metrics.
func metricValue(t *testing.T, addr, name, materializerName string) uint64 {
	t.Helper()
	fams, err := fixture.Scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := fixture.Value(fams, name, map[string]string{"materializer": materializerName})
	if !ok {
		t.Fatalf("no %s for %s in %v", name, materializerName, fams[name])
	}
	return uint64(v)
}

// TestServeRoutesRegistriesToBackends runs `fleetview serve` in-process with
// a registry without backendStore, then adds one whose backendStore is a
// real OpenSearch: Pods are materialized into OpenSearch only, ConfigMaps
// into Badger only, and the query API answers both (paging included)
// through the routing reader.
func TestServeRoutesRegistriesToBackends(t *testing.T) {
	node := itos.StartTest(t, itos.Options{JVMArgs: []string{"-XX:TieredStopAtLevel=1"}, DataDir: t.TempDir()})
	ns, nc, js := fixture.StartMatNATS(t, 0)
	ctx := context.Background()
	apply := fixture.RegistryApplier(t, ctx, js)
	apply(&registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: registry.ResourceRegistrySpec{TargetCluster: registry.ClusterAffinity{},
			ResourceSelectors: []registry.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}}}})
	o := app.ServeOptions{StateDir: t.TempDir(), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t), NATSClientOptions: app.NATSClientOptions{NATSURL: ns.ClientURL()}, MetricsOptions: app.MetricsOptions{MetricsAddr: fixture.FreeAddr(t)},
		BatchSize: 200, OpenSearch: app.OpenSearchOptions{IndexPrefix: "kubernetes-", BatchSize: 200, FlushInterval: 100 * time.Millisecond,
			Getenv: func(string) string { return "" }}}
	fixture.RunServeInProcess(t, o)
	// The OpenSearch registry arrives while serve runs: its backend is
	// connected and its materializer started on the fly.
	apply(&registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "pods-in-opensearch"},
		Spec: registry.ResourceRegistrySpec{TargetCluster: registry.ClusterAffinity{ClusterNames: []string{"c1", "c2"}},
			ResourceSelectors: []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}},
			BackendStore:      &registry.BackendStoreConfig{OpenSearch: &registry.OpenSearchConfig{Addresses: []string{node.URL()}}}}})
	osName := "opensearch-" + opensearch.ID(&registry.OpenSearchConfig{Addresses: []string{node.URL()}})
	fixture.Eventually(t, time.Minute, func() error {
		b, err := metricsPage(o.MetricsAddr)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte(`materializer="`+osName+`"`)) {
			return fmt.Errorf("no materializer %s yet", osName)
		}
		return nil
	})
	const pods = 600
	var evs []*fleetviewv1.ResourceEvent
	for i := range pods {
		evs = append(evs, benchdata.Event([]string{"c1", "c2"}[i%2], i, 1))
	}
	for i := range 30 {
		evs = append(evs, fixture.ConfigMap("c1", i), fixture.ConfigMap("c2", i))
	}
	fixture.PublishEvents(t, nc, evs)
	targets := fixture.LastSeqs(t, js, "c1", "c2")

	conn, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qc := fleetviewv1.NewQueryServiceClient(conn)
	count := func(resource string, limit int64) (int, error) {
		n, cont := 0, ""
		for {
			resp, err := qc.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: resource, Limit: limit, Continue: cont})
			if err != nil {
				return n, err
			}
			n += len(resp.GetRawItems())
			if cont = resp.GetContinue(); cont == "" {
				return n, nil
			}
		}
	}
	fixture.Eventually(t, 2*time.Minute, func() error {
		for resource, want := range map[string]int{"pods": pods, "configmaps": 60} {
			got, err := count(resource, 70)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s: %d of %d listed", resource, got, want)
			}
		}
		return nil
	})

	// Each backend holds only its own resources.
	direct, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fixture.ListAll(t, direct, query.ListOptions{GVR: benchdata.PodGVR})); got != pods {
		t.Fatalf("opensearch holds %d pods, want %d", got, pods)
	}
	if got := len(fixture.ListAll(t, direct, query.ListOptions{GVR: fixture.CMGVR})); got != 0 {
		t.Fatalf("opensearch holds %d configmaps, want none", got)
	}
	fixture.Eventually(t, time.Minute, func() error {
		fams, err := fixture.Scrape(o.MetricsAddr)
		if err != nil {
			return err
		}
		for c, seq := range targets {
			for _, m := range []string{"badger", osName} {
				l := map[string]string{"materializer": m, "cluster": c}
				if got, _ := fixture.Value(fams, "fleetview_materializer_applied_sequence", l); uint64(got) != seq {
					return fmt.Errorf("%s has applied %s up to %v, not %d", m, c, got, seq)
				}
				// Applied through the stream's end: no lag left.
				if lag, ok := fixture.Value(fams, "fleetview_materializer_lag_messages", l); !ok || lag != 0 {
					return fmt.Errorf("%s: %s lag %v (present %v), want 0", m, c, lag, ok)
				}
			}
		}
		return nil
	})
	if got := metricValue(t, o.MetricsAddr, "fleetview_materializer_events_skipped_total", "badger"); got != pods {
		t.Errorf("badger skipped %d events, want the %d pods", got, pods)
	}
	if got := metricValue(t, o.MetricsAddr, "fleetview_materializer_events_skipped_total", osName); got != 60 {
		t.Errorf("opensearch skipped %d events, want the 60 configmaps", got)
	}
	// Gets through the router: qualified from OpenSearch, and a conflict.
	resp, err := qc.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: benchdata.Namespace(3), Name: benchdata.PodName(3), Cluster: "c2"})
	if err != nil || resp.GetCluster() != "c2" {
		t.Fatalf("get pod 3 in c2: %v %v", resp, err)
	}
	if _, err := qc.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "configmaps", Namespace: benchdata.Namespace(3), Name: "cm-003"}); err == nil {
		t.Fatal("unqualified get of a configmap in two clusters did not conflict")
	}
	// Counts and relations through the router: Pods from OpenSearch's
	// aggregations (its own relation walk for Related), not refused.
	cnt, err := qc.Count(ctx, &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", By: []string{"cluster"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cnt.GetRows()); cnt.GetTotal() != pods || cnt.GetScanned() != "index" || len(cnt.GetRows()) != 2 ||
		cnt.GetRows()[0].GetCount() != pods/2 || cnt.GetRows()[1].GetCount() != pods/2 {
		t.Errorf("count of pods by cluster: total %d scanned %q rows %s; want %d from the index, %d per cluster", cnt.GetTotal(), cnt.GetScanned(), got, pods, pods/2)
	}
	rel, err := qc.Related(ctx, &fleetviewv1.RelatedRequest{Version: "v1", Resource: "pods", Namespace: benchdata.Namespace(3), Name: benchdata.PodName(3), Cluster: "c2"})
	if err != nil || len(rel.GetNodes()) == 0 || rel.GetNodes()[0].GetName() != benchdata.PodName(3) {
		t.Errorf("related of pod 3 in c2 (OpenSearch): %v %v", rel, err)
	}
	checkBackendOutage(t, ctx, node, conn, js, o.HTTPAddr)
}

// checkBackendOutage kills the OpenSearch node serving pods-in-opensearch
// and restarts it: while it is down, serve is not ready (the reason names
// the backend), /v1/clusters shows the error on the Pods it serves (not on
// the ConfigMaps Badger serves) and the registry's BackendReachable is
// False; once it is back, all three recover.
func checkBackendOutage(t *testing.T, ctx context.Context, node *itos.Node, conn *grpc.ClientConn, js jetstream.JetStream, httpAddr string) {
	t.Helper()
	kv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Registered, not ready: readiness then depends on the backends alone.
	for _, c := range []string{"c1", "c2"} {
		if err := inventory.Put(ctx, kv, &inventory.Cluster{Name: c, Heartbeat: time.Now(), ServedAPIs: []string{"v1"},
			Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true},
				{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	readyz := func() (int, string, error) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	cs := fleetviewv1.NewClusterServiceClient(conn)
	rs := fleetviewv1.NewRegistryServiceClient(conn)
	// state reads what the API says of the backend: readiness, the pods
	// and configmaps of c1, the registry's condition.
	type state struct {
		code                  int
		reason                string
		podErr, cmErr         string
		podBackend, cmBackend string
		cond                  string
	}
	read := func() (state, error) {
		var st state
		var err error
		if st.code, st.reason, err = readyz(); err != nil {
			return st, err
		}
		c, err := cs.GetCluster(ctx, &fleetviewv1.GetClusterRequest{Name: "c1"})
		if err != nil {
			return st, err
		}
		for _, r := range c.GetResources() {
			switch r.GetGvr().GetResource() {
			case "pods":
				st.podErr, st.podBackend = r.GetBackendError(), r.GetBackend()
			case "configmaps":
				st.cmErr, st.cmBackend = r.GetBackendError(), r.GetBackend()
			}
		}
		reg, err := rs.GetRegistry(ctx, &fleetviewv1.GetRegistryRequest{Name: "pods-in-opensearch"})
		if err != nil {
			return st, err
		}
		conds, _ := reg.GetRegistry().AsMap()["status"].(map[string]any)["conditions"].([]any)
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == registry.ConditionBackendReachable {
				st.cond = fmt.Sprint(m["status"], " ", m["reason"], ": ", m["message"])
			}
		}
		return st, nil
	}
	healthy := func() error {
		st, err := read()
		if err != nil {
			return err
		}
		if st.code != http.StatusOK || st.podErr != "" || st.cmErr != "" || !strings.HasPrefix(st.cond, "True Reachable") ||
			st.podBackend != "opensearch "+node.URL() || st.cmBackend != "badger" {
			return fmt.Errorf("not healthy: %+v", st)
		}
		return nil
	}
	fixture.Eventually(t, time.Minute, healthy)

	down := time.Now()
	if err := node.Halt(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, time.Minute, func() error {
		st, err := read()
		if err != nil {
			return err
		}
		if st.code != http.StatusServiceUnavailable || !strings.Contains(st.reason, "opensearch "+node.URL()) ||
			!strings.Contains(st.podErr, "unreachable") || st.cmErr != "" || !strings.HasPrefix(st.cond, "False Unreachable: opensearch "+node.URL()) {
			return fmt.Errorf("the outage does not show yet: %+v", st)
		}
		t.Logf("%s after the kill: readyz %d %q; pods: %q; registry: %q", time.Since(down).Round(time.Millisecond), st.code, st.reason, st.podErr, st.cond)
		return nil
	})
	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	fixture.Eventually(t, time.Minute, healthy)
	t.Logf("healthy again %s after the node's restart", time.Since(back).Round(time.Millisecond))
}
