package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/opensearch"
)

// TestOpenSearchClusterLosesANode runs `fleetview serve` in-process over a
// real three-node OpenSearch cluster (indices with one replica), loads a
// few thousand Pods, then kills -9 the node holding the Pods' primary
// shard. It shows that:
//
//   - every fresh paged list after the kill either fails (503 while the
//     replica is promoted) or returns exactly every Pod at the version the
//     stream holds: never a short or wrong page;
//   - Gets answer;
//   - a continue token taken before the kill continues correctly or is
//     410 (its snapshot lost shards): never a short or wrong page;
//   - events published after the kill are ingested and listed;
//   - /readyz stays ready once the cluster is yellow (readiness is for red
//     or unreachable clusters only).
//
// It logs how long reads and ingest stalled after the kill.
func TestOpenSearchClusterLosesANode(t *testing.T) {
	const clusterName = "fv-lose-node"
	cl := itos.StartTestCluster(t, itos.ClusterOptions{Nodes: 3, Node: itos.Options{ClusterName: clusterName, HeapMB: 384,
		JVMArgs: []string{"-XX:TieredStopAtLevel=1"}, DataDir: t.TempDir()}})
	ns, nc, js := fixture.StartMatNATS(t, 0)
	ctx := context.Background()
	apply := fixture.RegistryApplier(t, ctx, js)
	apply(&registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "pods-in-opensearch"},
		Spec: registry.ResourceRegistrySpec{TargetCluster: registry.ClusterAffinity{ClusterNames: []string{"c1", "c2", "c3", "c4"}},
			ResourceSelectors: []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}},
			BackendStore:      &registry.BackendStoreConfig{OpenSearch: &registry.OpenSearchConfig{Addresses: cl.URLs()}}}})
	o := app.ServeOptions{StateDir: t.TempDir(), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t), NATSClientOptions: app.NATSClientOptions{NATSURL: ns.ClientURL()}, MetricsOptions: app.MetricsOptions{MetricsAddr: fixture.FreeAddr(t)},
		BatchSize: 500, OpenSearch: app.OpenSearchOptions{IndexPrefix: "kubernetes-", BatchSize: 500, FlushInterval: 100 * time.Millisecond,
			Replicas: 1, ReadRetry: 30 * time.Second, Getenv: func(string) string { return "" }}}
	fixture.RunServeInProcess(t, o)
	// Registered, not ready: readiness then depends on the backends alone.
	kv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		if err := inventory.Put(ctx, kv, &inventory.Cluster{Name: c, Heartbeat: time.Now(), ServedAPIs: []string{"v1"},
			Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true}}}); err != nil {
			t.Fatal(err)
		}
	}

	const pods = 3000
	var evs []*fleetviewv1.ResourceEvent
	for i := range pods {
		evs = append(evs, benchdata.Event([]string{"c1", "c2"}[i%2], i, 1))
	}
	fixture.PublishEvents(t, nc, evs)
	want := streamVersions(t, fixture.MatStreamState(t, js, "c1", "c2"))

	conn, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qc := fleetviewv1.NewQueryServiceClient(conn)
	old := []string{"c1", "c2"}
	fixture.Eventually(t, 2*time.Minute, func() error {
		got, err := listVersions(ctx, qc, old, 100, "")
		if err != nil {
			return err
		}
		return diffVersions(got, want)
	})
	// Every shard has its replica on another node before the kill.
	fixture.Eventually(t, time.Minute, func() error { return clusterHealth(cl.URLs()[0], "green", 3) })
	if code, body := readyz(t, o.HTTPAddr); code != http.StatusOK {
		t.Fatalf("readyz %d before the kill: %s", code, body)
	}
	// The time of a whole list before the kill, to compare with those after.
	baseline := time.Now()
	if _, err := listVersions(ctx, qc, old, 100, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh list (30 pages of 100) takes %v before the kill", time.Since(baseline).Round(time.Millisecond))
	// And the time to ingest 1000 new Pods (in c4), as after the kill (c3).
	osName := "opensearch-" + opensearch.ID(&registry.OpenSearchConfig{Addresses: cl.URLs()})
	baseline = time.Now()
	var c4 []*fleetviewv1.ResourceEvent
	for i := range 1000 {
		c4 = append(c4, benchdata.Event("c4", i, 1))
	}
	fixture.PublishEvents(t, nc, c4)
	if at := watchApplied(o.MetricsAddr, osName, "c4", fixture.LastSeqs(t, js, "c4")["c4"])(); at.IsZero() {
		t.Fatal("c4 not applied within a minute")
	} else {
		t.Logf("1000 new Pods are applied %v after their publishing began, before the kill", at.Sub(baseline).Round(time.Millisecond))
	}
	// A continue token of a paged list begun before the kill.
	first, err := qc.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: old, Limit: 100})
	if err != nil || first.GetContinue() == "" {
		t.Fatalf("first page: %v (continue %q)", err, first.GetContinue())
	}
	firstPage, err := rawVersions(first.GetRawItems(), nil)
	if err != nil {
		t.Fatal(err)
	}

	// Kill the node holding the Pods' primary shard: its replica must be
	// promoted.
	victim, manager := podPrimaryNode(t, cl.URLs()[0], clusterName)
	survivor := cl.Nodes[(victim+1)%len(cl.Nodes)].URL()
	t.Logf("killing node %d (%s), the Pods' primary; cluster manager is %s", victim, itos.NodeName(clusterName, victim), manager)
	watch := watchReadyz(o.HTTPAddr, survivor)
	defer watch.stop()
	killed := time.Now()
	if err := cl.Nodes[victim].Halt(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Ingest after the kill: new Pods in c3, published at once.
	var more []*fleetviewv1.ResourceEvent
	for i := range 1000 {
		more = append(more, benchdata.Event("c3", i, 1))
	}
	fixture.PublishEvents(t, nc, more) // NATS is not affected: a second or so
	ingested := watchApplied(o.MetricsAddr, osName, "c3", fixture.LastSeqs(t, js, "c3")["c3"])

	// The old token: each page continues the snapshot exactly, or the
	// whole remainder is 410.
	cont, pages, expired := first.GetContinue(), 1, false
	seen := firstPage
	var slowestPage time.Duration
	for cont != "" {
		pageStart := time.Now()
		resp, err := qc.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: old, Limit: 100, Continue: cont})
		slowestPage = max(slowestPage, time.Since(pageStart))
		if status.Code(err) == codes.OutOfRange {
			t.Logf("the continue token taken before the kill is 410 after %d pages: %v", pages, err)
			expired = true
			break
		}
		if status.Code(err) == codes.Unavailable && time.Since(killed) < 90*time.Second {
			continue // 503: the same page again, as a client would
		}
		if err != nil {
			t.Fatalf("page %d of the list begun before the kill: %v", pages+1, err)
		}
		if n := len(resp.GetRawItems()); n != 100 && resp.GetContinue() != "" {
			t.Fatalf("page %d of the list begun before the kill has %d items", pages+1, n)
		}
		if seen, err = rawVersions(resp.GetRawItems(), seen); err != nil {
			t.Fatal(err)
		}
		cont = resp.GetContinue()
		pages++
	}
	if !expired {
		if err := diffVersions(seen, want); err != nil {
			t.Fatalf("the list begun before the kill, continued after it: %v", err)
		}
		t.Logf("the continue token taken before the kill continued to the end (%d pages)", pages)
	}
	t.Logf("the list begun before the kill ended %v after it; its slowest page took %v", time.Since(killed).Round(time.Millisecond), slowestPage.Round(time.Millisecond))

	// Fresh lists and Gets until three in a row answer: each answer is
	// the whole of c1 and c2.
	var readErrs []string
	var readsBack, slowestList time.Duration
	lists, ok := 0, 0
	fixture.Eventually(t, 90*time.Second, func() error {
		lists++
		listStart := time.Now()
		got, err := listVersions(ctx, qc, old, 100, "")
		slowestList = max(slowestList, time.Since(listStart))
		if err == nil {
			if derr := diffVersions(got, want); derr != nil {
				t.Fatalf("a fresh list %v after the kill: %v", time.Since(killed).Round(time.Millisecond), derr)
			}
			_, err = qc.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: benchdata.Namespace(lists), Name: benchdata.PodName(lists), Cluster: old[lists%2]})
		}
		if err != nil {
			if c := status.Code(err); c != codes.Unavailable && c != codes.OutOfRange && c != codes.DeadlineExceeded {
				t.Fatalf("read %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
			}
			readErrs = append(readErrs, fmt.Sprintf("%v: %v", time.Since(killed).Round(time.Millisecond), err))
			ok = 0
			return err
		}
		if ok++; ok == 1 {
			readsBack = time.Since(killed)
		}
		if ok < 3 {
			return fmt.Errorf("%d whole lists in a row", ok)
		}
		return nil
	})
	t.Logf("reads: first whole fresh list and get %v after the kill; slowest fresh list (30 pages) %v; %d failed reads: %v", readsBack.Round(time.Millisecond), slowestList.Round(time.Millisecond), len(readErrs), readErrs)

	// Ingest carried on: c3's Pods are listed, and c1's and c2's are as
	// before.
	want3 := streamVersions(t, fixture.MatStreamState(t, js, "c3"))
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := listVersions(ctx, qc, []string{"c3"}, 100, "")
		if err != nil {
			return err
		}
		return diffVersions(got, want3)
	})
	applied := ingested()
	if applied.IsZero() {
		t.Fatal("c3 listed but its applied sequence never seen")
	}
	t.Logf("ingest: the %d Pods published right after the kill were applied %v after it (listed by %v)", len(want3), applied.Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	got, err := listVersions(ctx, qc, old, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := diffVersions(got, want); err != nil {
		t.Fatal(err)
	}

	// Readiness: not ready at most until the cluster was yellow and the
	// next probe ran (every 2 s, answered within 2 s).
	yellow, notReady := watch.stop()
	if yellow.IsZero() {
		t.Fatal("the cluster was never seen yellow with two nodes after the kill")
	}
	t.Logf("cluster yellow with 2 nodes %v after the kill; readyz not ready at %v", yellow.Sub(killed).Round(time.Millisecond), notReady)
	for _, at := range notReady {
		if at.after > yellow.Sub(killed)+4*time.Second {
			t.Errorf("readyz not ready %v after the kill, the cluster yellow since %v: %s", at.after.Round(time.Millisecond), yellow.Sub(killed).Round(time.Millisecond), at.body)
		}
	}
}

// watchApplied polls serve's metrics every 100 ms until materializer has
// applied cluster's stream up to seq; the function it returns waits for
// that (at most a minute) and tells when (zero: never).
func watchApplied(metricsAddr, materializer, cluster string, seq uint64) func() time.Time {
	done := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if fams, err := fixture.Scrape(metricsAddr); err == nil {
				if v, _ := fixture.Value(fams, "fleetview_materializer_applied_sequence", map[string]string{"materializer": materializer, "cluster": cluster}); uint64(v) >= seq {
					done <- time.Now()
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- time.Time{}
	}()
	return func() time.Time { return <-done }
}

// streamVersions is the resourceVersion of each object the stream holds.
func streamVersions(t testing.TB, state map[fixture.ObjKey][]byte) map[fixture.ObjKey]string {
	t.Helper()
	out := make(map[fixture.ObjKey]string, len(state))
	for k, b := range state {
		var m struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out[k] = m.Metadata.ResourceVersion
	}
	return out
}

// rawVersions adds the objects of a list answer (their stored JSON with
// the fleetview.io/cluster annotation) to into, failing on a duplicate.
func rawVersions(items [][]byte, into map[fixture.ObjKey]string) (map[fixture.ObjKey]string, error) {
	if into == nil {
		into = map[fixture.ObjKey]string{}
	}
	for _, b := range items {
		var m struct {
			Metadata struct {
				Name, Namespace, ResourceVersion string
				Annotations                      map[string]string
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return into, err
		}
		k := fixture.ObjKey{Cluster: m.Metadata.Annotations["fleetview.io/cluster"], Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}
		if _, dup := into[k]; dup {
			return into, fmt.Errorf("object %v listed twice", k)
		}
		into[k] = m.Metadata.ResourceVersion
	}
	return into, nil
}

// listVersions pages through a fresh list of Pods (no retry: any failed
// page fails the list).
func listVersions(ctx context.Context, qc fleetviewv1.QueryServiceClient, clusters []string, limit int64, cont string) (map[fixture.ObjKey]string, error) {
	out := map[fixture.ObjKey]string{}
	for {
		resp, err := qc.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: clusters, Limit: limit, Continue: cont})
		if err != nil {
			return out, err
		}
		if out, err = rawVersions(resp.GetRawItems(), out); err != nil {
			return out, err
		}
		if cont = resp.GetContinue(); cont == "" {
			return out, nil
		}
	}
}

// diffVersions describes how got differs from want.
func diffVersions(got, want map[fixture.ObjKey]string) error {
	var problems []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			problems = append(problems, fmt.Sprintf("missing %v", k))
		} else if g != v {
			problems = append(problems, fmt.Sprintf("%v at version %s, want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("extra %v", k))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("%d listed, %d wanted, %d problems: %v", len(got), len(want), len(problems), problems[:min(5, len(problems))])
}

// clusterHealth is nil when the cluster's status is want with nodes nodes.
func clusterHealth(url, want string, nodes int) error {
	resp, err := http.Get(url + "/_cluster/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
		Nodes  int    `json:"number_of_nodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return err
	}
	if h.Status != want || h.Nodes != nodes {
		return fmt.Errorf("cluster %s with %d nodes, want %s with %d", h.Status, h.Nodes, want, nodes)
	}
	return nil
}

// podPrimaryNode is the index of the node holding the primary shard of the
// Pods' index, and the elected cluster manager's name.
func podPrimaryNode(t *testing.T, url, clusterName string) (int, string) {
	t.Helper()
	var shards []struct{ Prirep, Node string }
	getJSONInto(t, url+"/_cat/shards/kubernetes-pod?format=json&h=prirep,node", &shards)
	var managers []struct{ Node string }
	getJSONInto(t, url+"/_cat/cluster_manager?format=json&h=node", &managers)
	manager := ""
	if len(managers) == 1 {
		manager = managers[0].Node
	}
	for _, s := range shards {
		if s.Prirep != "p" {
			continue
		}
		for i := range 3 {
			if s.Node == itos.NodeName(clusterName, i) {
				return i, manager
			}
		}
	}
	t.Fatalf("no primary shard of kubernetes-pod on a known node: %+v", shards)
	return 0, ""
}

func getJSONInto(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	code, body, err := getReadyz(addr)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func getReadyz(addr string) (int, string, error) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// notReadyAt is one readyz answer other than 200.
type notReadyAt struct {
	after time.Duration // since the watch began
	body  string
}

// readyzWatch polls /readyz and a surviving node's cluster health every
// 100 ms from its start: when the cluster was first yellow with two
// nodes, and every answer of readyz other than 200.
type readyzWatch struct {
	start    time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	yellow   time.Time
	notReady []notReadyAt
}

func watchReadyz(addr, survivor string) *readyzWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &readyzWatch{start: time.Now(), cancel: cancel}
	w.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			code, body, err := getReadyz(addr)
			w.mu.Lock()
			if err != nil || code != http.StatusOK {
				if err != nil {
					body = err.Error()
				}
				w.notReady = append(w.notReady, notReadyAt{time.Since(w.start), body})
			}
			w.mu.Unlock()
			// Green too, should the replicas be allocated again already.
			if clusterHealth(survivor, "yellow", 2) == nil || clusterHealth(survivor, "green", 2) == nil {
				w.mu.Lock()
				if w.yellow.IsZero() {
					w.yellow = time.Now()
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// stop ends the watch (again: no-op) and returns what it saw.
func (w *readyzWatch) stop() (time.Time, []notReadyAt) {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.yellow, w.notReady
}
