package limits

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const limitsTokens = `alice-token,alice,1
bob-token,bob,2
carol-token,carol,3
dave-token,dave,4
`

const limitsPolicy = `rules:
- users: [alice, bob, carol, dave]
  verbs: ["*"]
  resources: ["*"]
- users: [alice]
  verbs: [registry-admin]
  resources: [registries]
- users: [alice, bob, carol, dave]
  verbs: [list]
  resources: [clusters]
`

// TestBoundedResourcesUnderLoad runs serve in-process (embedded NATS, the
// Badger backend, the query API; no kube-apiserver) over tens of thousands
// of objects, with small limits, and pushes every limit until it refuses:
// full lists from many clients at once (answered in capped pages, read
// whole by following continue), watches until 429 per client and for the
// server (released when a watch ends), oversized requests (413 before
// decoding, RESOURCE_EXHAUSTED on gRPC), and one client's paging against
// another's continue tokens. The heap is sampled throughout and must stay
// bounded; the figures are printed.
func TestBoundedResourcesUnderLoad(t *testing.T) {
	const (
		pods            = 24000
		maxListObjects  = 2000
		maxWatches      = 60
		watchesPerAlice = 40
		snapsPerClient  = 8
		listClients     = 8
		maxRequestBytes = 64 << 10
	)
	ns, nc, js := fixture.StartMatNATS(t, 0)
	ctx := context.Background()
	var evs []*fleetviewv1.ResourceEvent
	for i := range pods {
		evs = append(evs, benchdata.Event([]string{"c1", "c2"}[i%2], i, 1))
	}
	dataBytes := 0
	for _, ev := range evs {
		dataBytes += len(ev.GetObject())
	}
	fixture.PublishEvents(t, nc, evs)
	evs = nil
	kv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2"} {
		if err := inventory.Put(ctx, kv, &inventory.Cluster{Name: c, Ready: true, Heartbeat: time.Now(), ServedAPIs: []string{"v1"},
			Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, Synced: true, ObjectCount: pods / 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The catalog follows a cluster's resource only where a registry selects it.
	fixture.RegistryApplier(t, ctx, js)(fixture.RegistryFor("pods", []string{"c1", "c2"}, fixture.Sel("v1", "Pod", "")))
	dir := t.TempDir()
	for name, body := range map[string]string{"tokens.csv": limitsTokens, "policy.yaml": limitsPolicy} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := app.ServeOptions{StateDir: t.TempDir(), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t), NATSClientOptions: app.NATSClientOptions{NATSURL: ns.ClientURL()},
		Auth: app.AuthOptions{TokenFile: filepath.Join(dir, "tokens.csv"), PolicyFile: filepath.Join(dir, "policy.yaml")},
		Limits: app.LimitOptions{MaxListObjects: maxListObjects, MaxWatches: maxWatches, MaxWatchesPerClient: watchesPerAlice,
			MaxRequestBytes: maxRequestBytes, GRPCMaxConcurrentStreams: 100, MaxListSnapshots: 256, MaxListSnapshotsPerClient: snapsPerClient}}
	fixture.RunServeInProcess(t, o)
	base := "http://" + o.HTTPAddr
	lc := &limitClient{base: base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}}
	client, get, fetch := lc.http, lc.get, lc.fetch
	// The store has everything once a capped list reports it all.
	var listRV string
	fixture.Eventually(t, time.Minute, func() error {
		p, code, err := fetch(ctx, "alice-token", "/v1/resources/core/v1/pods", url.Values{"limit": {"1"}})
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("list: %d %v", code, err)
		}
		// The remaining count is exact without a selector: the store
		// holds everything when it says so.
		if p.RemainingItemCount != fmt.Sprint(pods-1) {
			return fmt.Errorf("the store holds %s+1 of %d pods", p.RemainingItemCount, pods)
		}
		listRV = p.ResourceVersion
		return nil
	})

	var heap heapSampler
	heap.start()
	defer heap.stop()

	// 1. Full lists (no limit) from many clients at once: every answer is
	// one capped page with a continue token, and following it reads the
	// whole list.
	pages := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make(chan error, listClients)
	for i := range listClients {
		wg.Go(func() {
			tok := []string{"alice-token", "bob-token"}[i%2]
			cont, n := "", 0
			for {
				q := url.Values{}
				if cont != "" {
					q.Set("continue", cont)
				}
				p, code, err := fetch(ctx, tok, "/v1/resources/core/v1/pods", q)
				if err != nil || code != http.StatusOK {
					errs <- fmt.Errorf("full list page: %d %v", code, err)
					return
				}
				if len(p.Items) > maxListObjects {
					errs <- fmt.Errorf("a page of %d objects, over the cap of %d", len(p.Items), maxListObjects)
					return
				}
				pages.Add(1)
				n += len(p.Items)
				if cont = p.Continue; cont == "" {
					break
				}
			}
			if n != pods {
				errs <- fmt.Errorf("full list read %d of %d pods", n, pods)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The Kubernetes path answers a list without limit up to its list
	// budget (docs/api.md, "Paged lists"), written as it reads the capped
	// query service, maxListObjects at a time (the heap bound below
	// holds); gRPC caps: limit=0 and a huge limit.
	kp, code, err := fetch(ctx, "alice-token", "/api/v1/pods", url.Values{"limit": {"0"}})
	if err != nil || code != http.StatusOK || len(kp.Items) != pods || kp.Metadata.Continue != "" || kp.Metadata.ResourceVersion == "" {
		t.Fatalf("Kubernetes full list: %d %v, %d items, continue %q, resourceVersion %q", code, err, len(kp.Items), kp.Metadata.Continue, kp.Metadata.ResourceVersion)
	}
	conn, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qc, rc := fleetviewv1.NewQueryServiceClient(conn), fleetviewv1.NewRegistryServiceClient(conn)
	as := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	for _, limit := range []int64{0, 1 << 40} {
		resp, err := qc.List(as("bob-token"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: limit})
		if err != nil || len(resp.GetRawItems()) != maxListObjects || resp.GetContinue() == "" {
			t.Fatalf("gRPC list limit %d: %v, %d items", limit, err, len(resp.GetRawItems()))
		}
	}
	sresp, err := qc.Search(as("bob-token"), &fleetviewv1.SearchRequest{Text: "c1"})
	if err != nil || len(sresp.GetItems()) != maxListObjects || sresp.GetContinue() == "" {
		t.Fatalf("gRPC search without limit: %v, %d hits", err, len(sresp.GetItems()))
	}

	// 2. Watches until the limits refuse. A resumed watch that selects
	// nothing still answers at once (its initial-events-end bookmark), so
	// each open watch costs the server its state, not its events.
	wq := url.Values{"labelSelector": {"app=none"}, "sendInitialEvents": {"true"}, "allowBookmarks": {"true"}}
	type openWatch struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var watches []openWatch
	openREST := func(tok string) (int, string, *openWatch) {
		wctx, wcancel := context.WithCancel(ctx)
		resp, err := get(wctx, tok, "/v1/watch/core/v1/pods", wq)
		if err != nil {
			wcancel()
			t.Fatalf("watch: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wcancel()
			return resp.StatusCode, string(b), nil
		}
		w := &openWatch{cancel: wcancel, done: make(chan struct{})}
		go func() {
			defer close(w.done)
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
		}()
		return http.StatusOK, "", w
	}
	defer func() {
		for _, w := range watches {
			w.cancel()
			<-w.done
		}
	}()
	refusal := func(what string, code int, body, reason, mention string) {
		t.Helper()
		var st limitPage
		_ = json.Unmarshal([]byte(body), &st)
		if code != http.StatusTooManyRequests || st.Reason != reason || st.Code != code || !strings.Contains(body, mention) {
			t.Fatalf("%s: %d %s, want 429 %s naming %q", what, code, body, reason, mention)
		}
	}
	for i := range watchesPerAlice {
		code, body, w := openREST("alice-token")
		if w == nil {
			t.Fatalf("alice's watch %d refused: %d %s", i, code, body)
		}
		watches = append(watches, *w)
	}
	code, body, _ := openREST("alice-token")
	refusal("alice's watch past her limit", code, body, "TooManyRequests", "--max-watches-per-client")
	// gRPC says the same.
	gw, err := qc.Watch(as("alice-token"), &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", ResourceVersion: listRV})
	if err == nil {
		_, err = gw.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice's gRPC watch past her limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Bob fills the server.
	for i := range maxWatches - watchesPerAlice {
		code, body, w := openREST("bob-token")
		if w == nil {
			t.Fatalf("bob's watch %d refused: %d %s", i, code, body)
		}
		watches = append(watches, *w)
	}
	code, body, _ = openREST("bob-token")
	refusal("bob's watch past the server's limit", code, body, "TooManyRequests", "--max-watches")
	// The Kubernetes path answers a metav1.Status.
	resp, err := get(ctx, "carol-token", "/api/v1/pods", url.Values{"watch": {"true"}, "resourceVersion": {kp.Metadata.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	refusal("a Kubernetes watch past the server's limit", resp.StatusCode, string(kb), "TooManyRequests", "--max-watches")
	if !bytes.Contains(kb, []byte(`"kind":"Status"`)) {
		t.Fatalf("Kubernetes refusal is not a Status: %s", kb)
	}
	// A watch that ends gives its place back.
	watches[0].cancel()
	<-watches[0].done
	watches = watches[1:]
	fixture.Eventually(t, 10*time.Second, func() error {
		code, body, w := openREST("alice-token")
		if w == nil {
			return fmt.Errorf("alice's watch after one ended: %d %s", code, body)
		}
		watches = append(watches, *w)
		return nil
	})
	heldWatches := len(watches)

	// 3. Oversized requests: refused before decoding, even unauthenticated.
	big := strings.Repeat("x", 2*maxRequestBytes)
	preq, _ := http.NewRequest(http.MethodPost, base+"/v1/registries", strings.NewReader(`{"metadata":{"name":"big"},"spec":{"x":"`+big+`"}}`))
	presp, err := client.Do(preq)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(pb, []byte(`"reason":"RequestEntityTooLarge"`)) {
		t.Fatalf("oversized registry body: %d %s", presp.StatusCode, pb)
	}
	reg, _ := structpb.NewStruct(map[string]any{"metadata": map[string]any{"name": "big"}, "spec": map[string]any{"x": big}})
	if _, err := rc.ApplyRegistry(as("alice-token"), &fleetviewv1.ApplyRegistryRequest{Registry: reg}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized gRPC registry: %v, want RESOURCE_EXHAUSTED", err)
	}

	// 4. Carol pages many lists at once: past her quota her own oldest
	// continue tokens expire, never dave's.
	first := func(tok string) string {
		p, code, err := fetch(ctx, tok, "/v1/resources/core/v1/pods", url.Values{"limit": {"10"}})
		if err != nil || code != http.StatusOK || p.Continue == "" {
			t.Fatalf("first page for %s: %d %v", tok, code, err)
		}
		return p.Continue
	}
	daveTok := first("dave-token")
	var carolToks []string
	for range 3 * snapsPerClient {
		carolToks = append(carolToks, first("carol-token"))
	}
	next := func(tok, cont string) int {
		_, code, _ := fetch(ctx, tok, "/v1/resources/core/v1/pods", url.Values{"limit": {"10"}, "continue": {cont}})
		return code
	}
	if code := next("dave-token", daveTok); code != http.StatusOK {
		t.Fatalf("dave's continue after carol's paging: %d", code)
	}
	expired := 0
	for i, tok := range carolToks {
		code := next("carol-token", tok)
		switch {
		case i < len(carolToks)-snapsPerClient && code == http.StatusGone:
			expired++
		case i >= len(carolToks)-snapsPerClient && code == http.StatusOK:
		default:
			t.Errorf("carol's list %d of %d: continue answered %d", i, len(carolToks), code)
		}
	}

	heap.stop()
	for _, w := range watches {
		w.cancel()
		<-w.done
	}
	watches = nil
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(heap.peak) - int64(heap.before)
	t.Logf("load: %d pods (%.1f MB of objects), %d concurrent full lists answered in %d pages of at most %d objects",
		pods, float64(dataBytes)/1e6, listClients, pages.Load(), maxListObjects)
	t.Logf("watches: %d held at the peak (%d for alice, her limit; the rest bob's up to the server's %d), refusals 429 on REST and Kubernetes, RESOURCE_EXHAUSTED on gRPC; a released place was taken again",
		heldWatches, watchesPerAlice, maxWatches)
	t.Logf("snapshots: carol opened %d paged lists with a quota of %d: %d of her oldest tokens expired (410), dave's survived", len(carolToks), snapsPerClient, expired)
	t.Logf("heap (test process: server and clients): before %.1f MB, peak %.1f MB (+%.1f MB, sampled every 10 ms), after %.1f MB",
		mb(heap.before), mb(heap.peak), float64(grew)/(1<<20), mb(after.HeapAlloc))
	// Generous, and still far below unbounded: a capped page is a few MB
	// (held as items, as the answer's bytes and by the client reading
	// it), garbage not yet collected counts too, and Badger's caches
	// warm up; an unbounded full list would hold the whole data set
	// several times over for each of the concurrent clients.
	unbounded := uint64(listClients) * uint64(dataBytes)
	t.Logf("an unbounded full list per client would hold at least %.1f MB at once (%d × the objects)", mb(unbounded), listClients)
	if bound := int64(512 << 20); grew > bound {
		t.Fatalf("the heap grew by %.1f MB under load, over %d MB", float64(grew)/(1<<20), bound>>20)
	}
}

// limitPage is what the load test reads of a list page or a Status.
type limitPage struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
	// RemainingItemCount is a string in the REST shape (an int64).
	RemainingItemCount string            `json:"remainingItemCount"`
	Items              []json.RawMessage `json:"items"`
	Metadata           struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Reason string `json:"reason"`
	Code   int    `json:"code"`
}

// limitClient calls the REST and Kubernetes paths with bearer tokens.
type limitClient struct {
	base string
	http *http.Client
}

func (c *limitClient) get(ctx context.Context, token, path string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return c.http.Do(req)
}

func (c *limitClient) fetch(ctx context.Context, token, path string, q url.Values) (limitPage, int, error) {
	resp, err := c.get(ctx, token, path, q)
	if err != nil {
		return limitPage{}, 0, err
	}
	defer resp.Body.Close()
	var p limitPage
	err = json.NewDecoder(resp.Body).Decode(&p)
	return p, resp.StatusCode, err
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// heapSampler records the live heap before and at its peak.
type heapSampler struct {
	before, peak uint64
	stopc, done  chan struct{}
	once         sync.Once
}

func (h *heapSampler) start() {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.before, h.peak = m.HeapAlloc, m.HeapAlloc
	h.stopc, h.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stopc:
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				h.peak = max(h.peak, m.HeapAlloc)
			}
		}
	}()
}

func (h *heapSampler) stop() {
	h.once.Do(func() {
		close(h.stopc)
		<-h.done
	})
}
