package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

// TestServeReroutesResources edits registries while `fleetview serve` runs
// so that resources already materialized change backend, with writes going
// on meanwhile:
//
//   - Pods cached in Badger are routed to a brand-new OpenSearch backend;
//   - then Pods go back to Badger and ConfigMaps (cached in Badger) go to
//     that OpenSearch backend, which is running and whose checkpoint is
//     past every ConfigMap it skipped;
//   - then both go back at once: OpenSearch still has its old, unserved
//     copy of the Pods (deleting it would block their return for a day,
//     see store/mover.go), which the move brings up to date.
//
// After each edit the new backend holds exactly the stream's objects,
// Badger holds nothing it does not serve, and Lists and a Search through
// the query API return each object once.
//
// Then across restarts, which only the table serve saves next to Badger
// bridges (its pins live in memory):
//
//   - with serve stopped, ConfigMaps (in Badger) are routed to OpenSearch,
//     whose checkpoint is past all of them: once serve is back, its first
//     answers are complete and the ConfigMaps move;
//   - Pods are routed back to Badger while serve runs, and serve is
//     stopped as soon as that move starts: once it is back, its first
//     answers are complete and the move is done over.
func TestServeReroutesResources(t *testing.T) {
	node := osNode.get(t)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	ctx := context.Background()
	apply := fixture.RegistryApplier(t, ctx, js)
	clusters := []string{"c1", "c2"}
	apply(&registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: registry.ResourceRegistrySpec{ResourceSelectors: []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}, {APIVersion: "v1", Kind: "ConfigMap"}}}})
	toOpenSearch := func(kinds ...string) *registry.ResourceRegistry {
		var sel []registry.ResourceSelector
		for _, k := range kinds {
			sel = append(sel, registry.ResourceSelector{APIVersion: "v1", Kind: k})
		}
		return &registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "to-opensearch"},
			Spec: registry.ResourceRegistrySpec{TargetCluster: registry.ClusterAffinity{ClusterNames: clusters},
				ResourceSelectors: sel,
				BackendStore:      &registry.BackendStoreConfig{OpenSearch: &registry.OpenSearchConfig{Addresses: []string{node.URL()}}}}}
	}
	o := app.ServeOptions{StateDir: t.TempDir(), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t), NATSClientOptions: app.NATSClientOptions{NATSURL: ns.ClientURL()},
		BatchSize: 200, OpenSearch: app.OpenSearchOptions{IndexPrefix: "kubernetes-", BatchSize: 200, FlushInterval: 100 * time.Millisecond,
			Getenv: func(string) string { return "" }}}
	var (
		cancel context.CancelFunc
		done   chan error
		// serve's log, to wait for the last step of a move (the old copy
		// dropped from Badger), which no read through the API can observe.
		serveLog *lineLog
		conn     *grpc.ClientConn
		qc       fleetviewv1.QueryServiceClient
		running  bool
	)
	// start runs serve, with a new client (no reconnection backoff).
	start := func() {
		t.Helper()
		var sctx context.Context
		sctx, cancel = context.WithCancel(ctx)
		done, serveLog, running = make(chan error, 1), &lineLog{}, true
		go func() { done <- app.RunServe(sctx, o, slog.New(slog.NewTextHandler(serveLog, nil))) }()
		var err error
		if conn, err = grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			t.Fatal(err)
		}
		qc = fleetviewv1.NewQueryServiceClient(conn)
	}
	stop := func() {
		t.Helper()
		if !running {
			return
		}
		running = false
		_ = conn.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("serve did not stop")
		}
	}
	t.Cleanup(stop)
	start()

	const pods, cms = 400, 60
	var evs []*fleetviewv1.ResourceEvent
	for i := range pods {
		evs = append(evs, benchdata.Event(clusters[i%2], i, 1))
	}
	for i := range cms {
		evs = append(evs, fixture.ConfigMap(clusters[i%2], i))
	}
	// Some history: deleted pods, whose tombstones a copy must honour.
	for i := 0; i < pods; i += 10 {
		evs = append(evs, benchdata.Delete(clusters[i%2], i, 2))
	}
	fixture.PublishEvents(t, nc, evs)

	direct, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// want is the stream's state of one resource.
	want := func(resource string) map[fixture.ObjKey][]byte {
		out := map[fixture.ObjKey][]byte{}
		for k, v := range fixture.MatStreamState(t, js, clusters...) {
			var m struct {
				Kind string `json:"kind"`
			}
			_ = json.Unmarshal(v, &m)
			if (resource == "pods") == (m.Kind == "Pod") {
				out[k] = v
			}
		}
		return out
	}
	// viaAPI checks that a paged List of a resource through the query API
	// returns each of the stream's objects exactly once.
	viaAPI := func(resource string) error {
		w := want(resource)
		seen := map[fixture.ObjKey]int{}
		cont := ""
		for restarts := 0; ; {
			// Waits for a serve just started to listen.
			resp, err := qc.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: resource, Limit: 70, Continue: cont}, grpc.WaitForReady(true))
			// A move's switch of reads between two pages expires the list
			// (410, gRPC OutOfRange): a client lists again from the start,
			// as client-go's reflector does, and what it gets must be whole.
			if status.Code(err) == codes.OutOfRange && cont != "" && restarts < 5 {
				t.Logf("list of %s expired after %d listed (%v); listing again", resource, len(seen), err)
				seen, cont, restarts = map[fixture.ObjKey]int{}, "", restarts+1
				continue
			}
			if err != nil {
				return err
			}
			for _, raw := range resp.GetRawItems() {
				seen[apiKey(t, raw)]++
			}
			if cont = resp.GetContinue(); cont == "" {
				break
			}
		}
		for k, n := range seen {
			if n != 1 {
				return fmt.Errorf("%s %v listed %d times", resource, k, n)
			}
			if _, ok := w[k]; !ok {
				return fmt.Errorf("%s %v listed but not in the stream", resource, k)
			}
		}
		if len(seen) != len(w) {
			return fmt.Errorf("%s: %d listed, %d in the stream", resource, len(seen), len(w))
		}
		return nil
	}
	// searchOnce checks that a Search over every backend finds each of the
	// stream's objects of a resource once. A move's switch of reads between
	// two pages expires the search (410, gRPC OutOfRange), as a client
	// sees it: it searches again, and what it finally gets must be whole.
	searchOnce := func(resource string) error {
		w := want(resource)
		seen := map[fixture.ObjKey]int{}
		cont := ""
		for restarts := 0; ; {
			resp, err := qc.Search(ctx, &fleetviewv1.SearchRequest{Text: "team", Resources: []string{"core/v1/" + resource}, Limit: 100, Continue: cont, Structured: true})
			if status.Code(err) == codes.OutOfRange && cont != "" && restarts < 5 {
				t.Logf("search of %s expired after %d found (%v); searching again", resource, len(seen), err)
				seen, cont, restarts = map[fixture.ObjKey]int{}, "", restarts+1
				continue
			}
			if err != nil {
				return err
			}
			for _, h := range resp.GetItems() {
				md := h.GetObject().GetFields()["metadata"].GetStructValue().GetFields()
				seen[fixture.ObjKey{Cluster: h.GetCluster(), Namespace: md["namespace"].GetStringValue(), Name: md["name"].GetStringValue()}]++
			}
			if cont = resp.GetContinue(); cont == "" {
				break
			}
		}
		for k, n := range seen {
			if n != 1 {
				return fmt.Errorf("search: %s %v found %d times", resource, k, n)
			}
		}
		if len(seen) != len(w) {
			return fmt.Errorf("search: %d %s found, %d in the stream", len(seen), resource, len(w))
		}
		return nil
	}
	// inOpenSearch checks OpenSearch holds exactly the stream's objects of
	// a resource.
	inOpenSearch := func(resource string) error {
		gvrs := map[string]query.ListOptions{"pods": {GVR: benchdata.PodGVR}, "configmaps": {GVR: fixture.CMGVR}}
		got := fixture.ListAll(t, direct, gvrs[resource])
		w := want(resource)
		if len(got) != len(w) {
			return fmt.Errorf("opensearch holds %d %s, the stream %d", len(got), resource, len(w))
		}
		for _, o := range got {
			if string(w[fixture.KeyFromObject(t, o)]) != string(o.JSON) {
				return fmt.Errorf("opensearch's %v differs from the stream", fixture.KeyFromObject(t, o))
			}
		}
		fixture.CompareWithStream(t, got, w)
		return nil
	}
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("pods") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("configmaps") })

	// 1. Pods go to a new OpenSearch backend; pods keep changing meanwhile.
	apply(toOpenSearch("Pod"))
	var updates []*fleetviewv1.ResourceEvent
	for i := 1; i < pods; i += 7 {
		updates = append(updates, benchdata.Event(clusters[i%2], i, 3))
	}
	fixture.PublishEvents(t, nc, updates)
	fixture.Eventually(t, 2*time.Minute, func() error { return inOpenSearch("pods") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("pods") })
	if err := viaAPI("configmaps"); err != nil {
		t.Fatal(err)
	}
	if err := searchOnce("pods"); err != nil {
		t.Fatal(err)
	}
	// Changes after the move reach OpenSearch.
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 2, 4), benchdata.Delete("c2", 3, 4)})
	fixture.Eventually(t, time.Minute, func() error { return inOpenSearch("pods") })

	// 2. Pods come back to Badger, ConfigMaps go to the running OpenSearch
	// backend (past them: it skipped every one).
	apply(toOpenSearch("ConfigMap"))
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{fixture.ConfigMap("c2", cms+1)})
	// The mover takes the resources into Badger first, so once OpenSearch
	// has the ConfigMaps, Badger serves the Pods.
	fixture.Eventually(t, 2*time.Minute, func() error { return inOpenSearch("configmaps") })
	// Pods change while Badger holds them: OpenSearch's unserved copy falls
	// behind.
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 5, 5), benchdata.Delete("c1", 12, 6)})
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("pods") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("configmaps") })
	if err := searchOnce("pods"); err != nil {
		t.Fatal(err)
	}
	if err := searchOnce("configmaps"); err != nil {
		t.Fatal(err)
	}
	if inOpenSearch("pods") == nil {
		t.Fatal("OpenSearch's copy of the pods follows the stream while Badger holds them")
	}

	// 3. Pods go back to OpenSearch, ConfigMaps to Badger (first: once
	// OpenSearch's pods are up to date, Badger has the ConfigMaps).
	apply(toOpenSearch("Pod"))
	fixture.Eventually(t, 2*time.Minute, func() error { return inOpenSearch("pods") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("pods") })
	// A ConfigMap OpenSearch's unserved copy lacks.
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{fixture.ConfigMap("c1", cms+3)})
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("configmaps") })
	// Reads switch before the old copy goes: wait for both clusters' Pods
	// to have left Badger a second time (steps 1 and 3).
	fixture.Eventually(t, time.Minute, func() error {
		if n := serveLog.count(`msg="resource moved between backends"`, `resource="/v1, Resource=pods"`, `from=""`); n < 4 {
			return fmt.Errorf("%d moves of pods out of Badger logged, want 4", n)
		}
		return nil
	})

	// 4. Badger itself: the configmaps as in the stream, no pod left.
	stop()
	inBadger := func(check func(r *badger.Reader)) {
		t.Helper()
		st, err := badger.Open(badger.Options{Dir: filepath.Join(o.StateDir, "badger"), Logger: fixture.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		r := st.Reader(badger.ReaderOptions{})
		defer r.Close()
		check(r)
	}
	inBadger(func(r *badger.Reader) {
		fixture.CompareWithStream(t, fixture.ListAll(t, r, query.ListOptions{GVR: fixture.CMGVR}), want("configmaps"))
		if n := len(fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR})); n != 0 {
			t.Fatalf("badger still holds %d pods", n)
		}
	})

	// 5. While serve is stopped, ConfigMaps go to OpenSearch too; its
	// checkpoint is past every one of them. Nothing is published meanwhile,
	// so Badger holds the stream's ConfigMaps and the first answers of the
	// restarted serve must be complete.
	apply(toOpenSearch("Pod", "ConfigMap"))
	start()
	if err := viaAPI("configmaps"); err != nil {
		t.Fatalf("first list after a restart: %v", err)
	}
	if err := viaAPI("pods"); err != nil {
		t.Fatalf("first list after a restart: %v", err)
	}
	if err := searchOnce("configmaps"); err != nil {
		t.Fatalf("first search after a restart: %v", err)
	}
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{fixture.ConfigMap("c1", cms+2)})
	fixture.Eventually(t, 2*time.Minute, func() error { return inOpenSearch("configmaps") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("configmaps") })
	fixture.Eventually(t, time.Minute, func() error {
		if n := serveLog.count(`msg="resource moved between backends"`, `resource="/v1, Resource=configmaps"`, `from=""`); n < 2 {
			return fmt.Errorf("%d moves of configmaps out of Badger logged, want 2", n)
		}
		return nil
	})
	if err := searchOnce("configmaps"); err != nil {
		t.Fatal(err)
	}

	// 6. Pods go back to Badger while serve runs, and serve is cancelled
	// the moment the move starts (from its log line, before the mover goes
	// on). OpenSearch keeps the Pods until the move's switch, so they stay
	// complete there: the restarted serve must serve them from it, and move
	// them again.
	cancelRun := cancel
	serveLog.onLine(func(line string) {
		if strings.Contains(line, `msg="moving resources between backends"`) && strings.Contains(line, `to=""`) {
			cancelRun()
		}
	})
	apply(toOpenSearch("ConfigMap"))
	select {
	case err := <-done:
		running = false
		_ = conn.Close()
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the move of the pods into Badger did not start")
	}
	if n := serveLog.count(`msg="backends rerouted"`); n != 1 {
		t.Fatalf("%d moves logged by the stopped serve, want only the ConfigMaps' (the Pods' was cut short)", n)
	}
	start()
	if err := viaAPI("pods"); err != nil {
		t.Fatalf("first list after a restart mid-move: %v", err)
	}
	if err := searchOnce("pods"); err != nil {
		t.Fatalf("first search after a restart mid-move: %v", err)
	}
	fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{benchdata.Event("c2", 7, 8), benchdata.Delete("c1", 14, 8)})
	fixture.Eventually(t, time.Minute, func() error {
		if serveLog.count(`msg="resource moved between backends"`, `resource="/v1, Resource=pods"`, `to=""`) < 2 {
			return fmt.Errorf("the pods of both clusters have not moved into Badger")
		}
		return nil
	})
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("pods") })
	fixture.Eventually(t, time.Minute, func() error { return viaAPI("configmaps") })
	if err := searchOnce("pods"); err != nil {
		t.Fatal(err)
	}
	stop()
	inBadger(func(r *badger.Reader) {
		fixture.CompareWithStream(t, fixture.ListAll(t, r, query.ListOptions{GVR: benchdata.PodGVR}), want("pods"))
		if n := len(fixture.ListAll(t, r, query.ListOptions{GVR: fixture.CMGVR})); n != 0 {
			t.Fatalf("badger still holds %d configmaps", n)
		}
	})
}

// apiKey names an object the query API returned (raw), by the cluster
// annotation it adds.
func apiKey(t testing.TB, raw []byte) fixture.ObjKey {
	t.Helper()
	var m struct {
		Metadata struct {
			Name, Namespace string
			Annotations     map[string]string
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("listed object is not JSON: %v", err)
	}
	return fixture.ObjKey{Cluster: m.Metadata.Annotations["fleetview.io/cluster"], Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}
}

// lineLog keeps log lines for a test to wait on.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	hook  func(line string)
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(p), "\n"), "\n")
	l.lines = append(l.lines, lines...)
	if l.hook != nil {
		for _, line := range lines {
			l.hook(line)
		}
	}
	return len(p), nil
}

// onLine calls f with every line logged from now on, as it is written:
// before the code that logged it goes on.
func (l *lineLog) onLine(f func(line string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hook = f
}

// count is how many lines hold every one of subs.
func (l *lineLog) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}
