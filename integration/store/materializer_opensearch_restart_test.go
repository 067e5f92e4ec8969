package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/integration/fixture"
	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/opensearch"
)

// TestMaterializerOpenSearchRestart stops the OpenSearch server itself (not
// a proxy in front of it) during ingest, once with SIGTERM and once with
// SIGKILL, and starts it again on the same data directory and port, while
// pod creates, updates and deletes keep being published: during the stop,
// while the server is down and during its start. Afterwards OpenSearch must
// hold exactly each subject's last state in the stream (document version =
// stream sequence, resourceVersion and object as published, deleted pods
// absent), the checkpoints must equal the streams' last sequences, no
// document may have gone back to an older version across a restart, and the
// materializer must never have given up (Run still running, nothing
// dead-lettered).
func TestMaterializerOpenSearchRestart(t *testing.T) {
	began := time.Now()
	node := itos.StartTest(t, itos.Options{DataDir: t.TempDir(), JVMArgs: []string{"-XX:TieredStopAtLevel=1"}})
	_, nc, js := fixture.StartMatNATS(t, 0)
	retries := &retryCounter{Handler: fixture.Logger(t).Handler(), n: &atomic.Int64{}}
	ostore, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, MaxBackoff: 500 * time.Millisecond, Logger: slog.New(retries)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ostore.Close() })
	index := ostore.IndexFor("Pod")
	clusters := []string{"c1", "c2"}

	w := newRestartWorkload(clusters, 1000)
	fixture.PublishEvents(t, nc, w.initial())
	trigger := &batchTrigger{}
	m := startWatchedMaterializer(t, materializer.Config{Name: "opensearch-restart", NATS: nc, Sink: ostore, BatchSize: 200,
		DiscoverInterval: 200 * time.Millisecond, Observer: trigger.observe, Logger: fixture.Logger(t)})

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Logf("outage with %v at %v", sig, time.Since(began).Round(time.Millisecond))
		// The server goes right after the materializer committed its first
		// batch of this wave, with most of the wave still to apply.
		from := fixture.LastSeqs(t, js, clusters...)
		fired := trigger.arm(from)
		publishing := publishAsync(nc, w.wave())
		m.eventually(t, 2*time.Minute, func() error {
			select {
			case <-fired:
				return nil
			default:
				return fmt.Errorf("no batch past %v committed yet (applied %v)", from, m.Applied())
			}
		})
		before := searchDocs(t, node.URL(), index, false)
		ckptBefore := checkpoints(ctx, t, ostore, clusters)
		retriesBefore := retries.n.Load()
		pid := node.PID()
		applied, published := m.Applied(), fixture.LastSeqs(t, js, clusters...)
		if err := node.Halt(sig); err != nil {
			t.Fatalf("halt opensearch with %v: %v", sig, err)
		}
		t.Logf("%v: halted pid %d with %d docs indexed, applied %v of %v", sig, pid, len(before), applied, published)
		if err := <-publishing; err != nil {
			t.Fatal(err)
		}

		// More events while the server is down: none of them can be applied.
		fixture.PublishEvents(t, nc, w.wave())
		down := fixture.LastSeqs(t, js, clusters...)
		m.check(t)
		for _, c := range clusters {
			if got := m.Applied()[c]; got >= down[c] {
				t.Fatalf("cluster %s: applied %d of %d while OpenSearch was down", c, got, down[c])
			}
		}

		// And while it starts again.
		publishing = publishAsync(nc, w.wave())
		if err := node.Restart(ctx); err != nil {
			t.Fatalf("restart opensearch after %v: %v", sig, err)
		}
		if err := <-publishing; err != nil {
			t.Fatal(err)
		}
		if retries.n.Load() == retriesBefore {
			t.Fatalf("the OpenSearch sink logged no retry across the %v outage: it never saw the server gone", sig)
		}
		if node.PID() == pid || node.PID() == 0 {
			t.Fatalf("pid after restart %d, before %d", node.PID(), pid)
		}
		refreshAll(t, node.URL())
		noRegression(t, js, clusters, before, searchDocs(t, node.URL(), index, false))
		for c, after := range checkpoints(ctx, t, ostore, clusters) {
			if after < ckptBefore[c] {
				t.Fatalf("cluster %s: checkpoint %d after the restart, %d before it", c, after, ckptBefore[c])
			}
		}
	}

	targets := fixture.LastSeqs(t, js, clusters...)
	m.eventually(t, 3*time.Minute, func() error {
		got := m.Applied()
		for c, want := range targets {
			if got[c] < want {
				return fmt.Errorf("cluster %s applied %d of %d", c, got[c], want)
			}
		}
		return nil
	})
	t.Logf("caught up at %v: %v", time.Since(began).Round(time.Millisecond), targets)

	for c, got := range checkpoints(ctx, t, ostore, clusters) {
		if got != targets[c] {
			t.Errorf("cluster %s: checkpoint %d, stream's last sequence %d", c, got, targets[c])
		}
	}
	want := map[string]streamLast{}
	upserts, deletes := 0, 0
	for _, c := range clusters {
		for id, l := range lastPerSubject(t, js, c) {
			want[id] = l
			if l.ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
				upserts++
			} else {
				deletes++
			}
		}
	}
	if live, gone := w.live()*len(clusters), len(w.deleted)*len(clusters); upserts != live || deletes != gone {
		t.Fatalf("stream holds %d live objects and %d tombstones, the workload published %d and %d", upserts, deletes, live, gone)
	}
	got := searchDocs(t, node.URL(), index, true)
	var problems []string
	for id, l := range want {
		d, ok := got[id]
		switch {
		case l.ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			if ok {
				problems = append(problems, fmt.Sprintf("%s: deleted at seq %d, present at version %d", id, l.seq, d.Version))
			}
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: missing (seq %d)", id, l.seq))
		case d.Version != l.seq || d.Source.FV.Seq != l.seq:
			problems = append(problems, fmt.Sprintf("%s: version %d seq %d, stream seq %d", id, d.Version, d.Source.FV.Seq, l.seq))
		case d.Source.Metadata.ResourceVersion != l.ev.GetResourceVersion() || d.Source.FV.Object != string(l.ev.GetObject()):
			problems = append(problems, fmt.Sprintf("%s: resourceVersion %q, stream %q (or the object differs)", id, d.Source.Metadata.ResourceVersion, l.ev.GetResourceVersion()))
		}
	}
	for id, d := range got {
		if _, ok := want[id]; !ok {
			problems = append(problems, fmt.Sprintf("%s: in OpenSearch (version %d), not in the stream", id, d.Version))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("OpenSearch != stream (%d docs, %d live subjects): %d problems, first: %v", len(got), upserts, len(problems), problems[:min(20, len(problems))])
	}
	// The read path agrees.
	fixture.CompareWithStream(t, fixture.ListAll(t, ostore, query.ListOptions{GVR: benchdata.PodGVR}), fixture.MatStreamState(t, js, clusters...))

	m.check(t)
	if n := m.Metrics().DeadLettered.Load(); n != 0 {
		t.Errorf("%d events dead-lettered: the sink gave up on them", n)
	}
	t.Logf("%d live objects, %d tombstones, %d events; total %v", upserts, deletes, w.events, time.Since(began).Round(time.Millisecond))
}

// restartWorkload produces pod events per cluster: creates, then waves of
// updates, deletes and new pods. A deleted pod is never published again (a
// new object would get a new uid).
type restartWorkload struct {
	clusters []string
	n        int // pods created initially
	wavesN   int
	next     int // next new pod index
	rv       int
	deleted  map[int]bool
	events   int
}

func newRestartWorkload(clusters []string, n int) *restartWorkload {
	return &restartWorkload{clusters: clusters, n: n, next: n, rv: 1, deleted: map[int]bool{}}
}

// live is the number of pods per cluster not deleted.
func (w *restartWorkload) live() int { return w.next - len(w.deleted) }

func (w *restartWorkload) initial() []*fleetviewv1.ResourceEvent {
	var evs []*fleetviewv1.ResourceEvent
	for i := range w.n {
		for _, c := range w.clusters {
			evs = append(evs, benchdata.Event(c, i, 1))
		}
	}
	w.events += len(evs)
	return evs
}

// wave updates half of the pods, deletes one in 13 and creates 50.
func (w *restartWorkload) wave() []*fleetviewv1.ResourceEvent {
	w.rv++
	k := w.wavesN
	w.wavesN++
	var evs []*fleetviewv1.ResourceEvent
	for i := range w.next {
		if w.deleted[i] {
			continue
		}
		if i%13 == k%13 {
			w.deleted[i] = true
			for _, c := range w.clusters {
				evs = append(evs, benchdata.Delete(c, i, w.rv))
			}
			continue
		}
		if i%2 == k%2 {
			for _, c := range w.clusters {
				evs = append(evs, benchdata.Event(c, i, w.rv))
			}
		}
	}
	for range 50 {
		for _, c := range w.clusters {
			evs = append(evs, benchdata.Event(c, w.next, w.rv))
		}
		w.next++
	}
	w.events += len(evs)
	return evs
}

// retryCounter counts the sink's "retrying" warnings (requests or bulk items
// that failed and are sent again).
type retryCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (h *retryCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.Handler.Enabled(ctx, l)
}

func (h *retryCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, "retrying") {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *retryCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &retryCounter{Handler: h.Handler.WithAttrs(as), n: h.n}
}

func (h *retryCounter) WithGroup(name string) slog.Handler {
	return &retryCounter{Handler: h.Handler.WithGroup(name), n: h.n}
}

// batchTrigger fires (closes a channel) when the materializer has committed
// a batch past given sequences: it is the materializer's Observer.
type batchTrigger struct {
	mu    sync.Mutex
	after map[string]uint64
	ch    chan struct{}
}

func (b *batchTrigger) arm(after map[string]uint64) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.after, b.ch = after, make(chan struct{})
	return b.ch
}

func (b *batchTrigger) observe(fb feed.Batch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil && fb.LastSeq > b.after[fb.Cluster] {
		close(b.ch)
		b.ch = nil
	}
}

// publishAsync publishes events (into existing streams) in the background,
// in small slices so that publishing spreads over time.
func publishAsync(nc *nats.Conn, evs []*fleetviewv1.ResourceEvent) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		p, err := benchdata.NewPublisher(nc)
		if err != nil {
			done <- err
			return
		}
		for len(evs) > 0 {
			chunk := evs[:min(100, len(evs))]
			evs = evs[len(chunk):]
			if _, err := p.Publish(ctx, func(yield func(*fleetviewv1.ResourceEvent) bool) {
				for _, ev := range chunk {
					if !yield(ev) {
						return
					}
				}
			}); err != nil {
				done <- fmt.Errorf("publish: %w", err)
				return
			}
		}
		done <- nil
	}()
	return done
}

// watchedMaterializer is a running materializer whose Run is watched: a
// return before the test ends (the materializer gave up) fails the test at
// the next check.
type watchedMaterializer struct {
	*materializer.Materializer
	name string
	done chan error
}

func startWatchedMaterializer(t *testing.T, cfg materializer.Config) *watchedMaterializer {
	t.Helper()
	m, err := materializer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchedMaterializer{Materializer: m, name: cfg.Name, done: make(chan error, 1)}
	go func() { w.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-w.done; err != nil {
			t.Errorf("materializer %s: %v", cfg.Name, err)
		}
	})
	return w
}

// check fails the test if Run has returned.
func (w *watchedMaterializer) check(t *testing.T) {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup
		t.Fatalf("materializer %s gave up: Run returned %v", w.name, err)
	default:
	}
}

// eventually is eventually() that also fails at once when Run returned.
func (w *watchedMaterializer) eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	fixture.Eventually(t, timeout, func() error {
		w.check(t)
		return f()
	})
}

func checkpoints(ctx context.Context, t *testing.T, s *opensearch.Store, clusters []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, c := range clusters {
		seq, err := s.Checkpoint(ctx, c)
		if err != nil {
			t.Fatalf("checkpoint of %s: %v", c, err)
		}
		out[c] = seq
	}
	return out
}

// osDoc is what the test reads back of a document, straight from OpenSearch.
type osDoc struct {
	Version uint64 `json:"_version"`
	Source  struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		FV struct {
			Seq    uint64 `json:"seq"`
			Object string `json:"object"`
		} `json:"fleetview"`
	} `json:"_source"`
}

// searchDocs reads every document of an index (fewer than 10000) by id:
// versions only, or with the fields the test compares.
func searchDocs(t *testing.T, url, index string, source bool) map[string]osDoc {
	t.Helper()
	src := "false"
	if source {
		src = `["metadata.resourceVersion","fleetview.seq","fleetview.object"]`
	}
	body := `{"size":10000,"version":true,"track_total_hits":true,"query":{"match_all":{}},"_source":` + src + `}`
	b := osRequest(t, http.MethodPost, url+"/"+index+"/_search", body)
	var res struct {
		Hits struct {
			Total struct {
				Value int `json:"value"`
			} `json:"total"`
			Hits []struct {
				ID string `json:"_id"`
				osDoc
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("search %s: %v", index, err)
	}
	if res.Hits.Total.Value != len(res.Hits.Hits) {
		t.Fatalf("search %s: %d hits of %d", index, len(res.Hits.Hits), res.Hits.Total.Value)
	}
	out := make(map[string]osDoc, len(res.Hits.Hits))
	for _, h := range res.Hits.Hits {
		out[h.ID] = h.osDoc
	}
	return out
}

// refreshAll makes everything recovered from the translog searchable.
func refreshAll(t *testing.T, url string) {
	t.Helper()
	osRequest(t, http.MethodPost, url+"/_refresh", "")
}

func osRequest(t *testing.T, method, url, body string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s (%v)", method, url, resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 2048)]), err)
	}
	return b
}

// streamLast is a subject's last message in its stream.
type streamLast struct {
	seq uint64
	ev  *fleetviewv1.ResourceEvent
}

// lastPerSubject reads a cluster stream's last message per object subject,
// by OpenSearch document id.
func lastPerSubject(t *testing.T, js jetstream.JetStream, cluster string) map[string]streamLast {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := map[string]streamLast{}
	fixture.EachLastPerSubject(t, ctx, js, cluster, func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		ev, err := stream.Decode(msg.Subject(), msg.Data())
		if err != nil {
			t.Fatalf("stream message %s: %v", msg.Subject(), err)
		}
		out[opensearch.DocID(cluster, stream.GVR(ev.GetGvr()), ev.GetUid())] = streamLast{seq: md.Sequence.Stream, ev: ev}
	})
	return out
}

// noRegression compares documents read just before a server stop with those
// after its restart: each is still there at the same or a newer version, or
// was deleted by a later event of the stream.
func noRegression(t *testing.T, js jetstream.JetStream, clusters []string, before, after map[string]osDoc) {
	t.Helper()
	var last map[string]streamLast
	var problems []string
	for id, b := range before {
		a, ok := after[id]
		if ok {
			if a.Version < b.Version {
				problems = append(problems, fmt.Sprintf("%s: version %d before the restart, %d after", id, b.Version, a.Version))
			}
			continue
		}
		if last == nil {
			last = map[string]streamLast{}
			for _, c := range clusters {
				for k, v := range lastPerSubject(t, js, c) {
					last[k] = v
				}
			}
		}
		if l, ok := last[id]; !ok || l.ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_DELETE || l.seq <= b.Version {
			problems = append(problems, fmt.Sprintf("%s: at version %d before the restart, gone after it without a later delete", id, b.Version))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("documents went back across the restart (%d before, %d after): %d problems, first: %v", len(before), len(after), len(problems), problems[:min(20, len(problems))])
	}
}
