package badger

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store"
)

func ev(seq uint64, e *fleetviewv1.ResourceEvent) feed.Event {
	return feed.Event{Seq: seq, Event: e}
}

// applyPods applies Pods 0..n-1 of cluster c1 at resourceVersion rv, in
// batches, numbering the events on from *seq.
func applyPods(t *testing.T, s *Store, n, rv, batch int, seq *uint64) {
	t.Helper()
	for i := 0; i < n; i += batch {
		evs := make([]feed.Event, min(batch, n-i))
		for j := range evs {
			*seq++
			evs[j] = ev(*seq, benchdata.Event("c1", i+j, rv))
		}
		if err := s.Apply(context.Background(), "c1", evs, *seq); err != nil {
			t.Fatal(err)
		}
	}
}

func names(t *testing.T, r *Reader, sel string) []string {
	t.Helper()
	s, err := labels.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.List(context.Background(), query.ListOptions{GVR: benchdata.PodGVR, Labels: s})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range p.Items {
		k := bytes.Index(o.JSON, []byte(`"name":"`))
		e := bytes.IndexByte(o.JSON[k+8:], '"')
		out = append(out, o.Cluster+"/"+string(o.JSON[k+8:k+8+e]))
	}
	return out
}

func TestApply(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	ctx := context.Background()
	p0, p1, p2 := benchdata.PodName(0), benchdata.PodName(1), benchdata.PodName(2)

	// Upserts, a label change, and a deleted-and-recreated object whose
	// new uid arrives before the old uid's tombstone.
	moved := benchdata.Event("c1", 1, 2)
	moved.Object = bytes.Replace(moved.Object, []byte(`"tier":"backend"`), []byte(`"tier":"moved"`), 1)
	re := benchdata.Event("c1", 2, 5)
	re.Uid = "new-uid"
	re.Object = bytes.Replace(re.Object, []byte(benchdata.UID("c1", 2)), []byte("new-uid"), 1)
	if err := s.Apply(ctx, "c1", []feed.Event{
		ev(1, benchdata.Event("c1", 0, 1)), ev(2, benchdata.Event("c1", 1, 1)), ev(3, benchdata.Event("c1", 2, 1)),
		ev(4, moved), ev(5, re), ev(6, benchdata.Delete("c1", 2, 6)),
	}, 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, "c2", []feed.Event{ev(1, benchdata.Event("c2", 0, 1))}, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sel, want string }{
		{"", "[c1/" + p0 + " c2/" + p0 + " c1/" + p1 + " c1/" + p2 + "]"},
		{"tier=moved", "[c1/" + p1 + "]"},
		{"tier=backend", "[]"},
		{"tier=frontend", "[c1/" + p0 + " c2/" + p0 + " c1/" + p2 + "]"},
	} {
		if got := names(t, r, tc.sel); fmtList(got) != tc.want {
			t.Errorf("list %q = %s, want %s", tc.sel, fmtList(got), tc.want)
		}
	}
	o, err := r.Get(ctx, query.GetOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(2), Name: p2, Cluster: "c1"})
	if err != nil || !bytes.Contains(o.JSON, []byte("new-uid")) {
		t.Fatalf("recreated object: %v %.100s", err, o.JSON)
	}
	if c, _ := s.Checkpoint(ctx, "c1"); c != 6 {
		t.Fatalf("checkpoint = %d", c)
	}

	// A poison object is reported with its sequence and nothing of the
	// batch is committed.
	bad := benchdata.Event("c1", 9, 1)
	bad.Object = []byte(`{"metadata":`)
	err = s.Apply(ctx, "c1", []feed.Event{ev(7, benchdata.Event("c1", 8, 1)), ev(8, bad)}, 8)
	var pe *materializer.PoisonError
	if !errors.As(err, &pe) || pe.Seq != 8 || !errors.Is(err, materializer.ErrPoison) {
		t.Fatalf("poison: %v", err)
	}
	if c, _ := s.Checkpoint(ctx, "c1"); c != 6 {
		t.Fatalf("checkpoint after a refused batch = %d", c)
	}

	// Removing the resource in c1 leaves c2 alone.
	if err := s.Apply(ctx, "c1", []feed.Event{ev(9, &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: stream.ProtoGVR(benchdata.PodGVR),
		Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED})}, 9); err != nil {
		t.Fatal(err)
	}
	if got := fmtList(names(t, r, "")); got != "[c2/"+p0+"]" {
		t.Fatalf("after removal: %s", got)
	}
	if got := fmtList(names(t, r, "tier=frontend")); got != "[c2/"+p0+"]" {
		t.Fatalf("label index after removal: %s", got)
	}
}

func fmtList(s []string) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	b.WriteByte(']')
	return b.String()
}

// level0Tables counts the store's level-0 tables.
func level0Tables(s *Store) int {
	n := 0
	for _, t := range s.db.Tables() {
		if t.Level == 0 {
			n++
		}
	}
	return n
}

// A bulk-loaded store (a rebuild) keeps up to 20 level-0 tables
// uncompacted; the next ordinary open merges them down.
func TestBulkLoadDefersCompaction(t *testing.T) {
	dir := t.TempDir()
	// 1 MiB memtables: every ~1,600 Pods make a level-0 table (without the
	// value index and the relationship index, whose entries would make
	// more than 20 of them, and so a compaction even while bulk loading).
	o := Options{Dir: dir, MemTableSize: 1 << 20, ValueLogGCInterval: -1, BulkLoad: true, ValueIndex: []IndexedValue{}, NoRelations: true}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	applyPods(t, s, 25000, 1, 100, &seq)
	// Measured while the bulk-loading store is open: a reopened store
	// starts compacting inside Open, so what it holds when Open returns
	// is not what the bulk load left (CI once saw 0 level-0 tables there).
	// Memtables flush on their own goroutine: wait for them.
	deadline := time.Now().Add(time.Minute)
	for level0Tables(s) <= 10 {
		if time.Now().After(deadline) {
			t.Fatalf("bulk load holds %d level-0 tables after a minute: compaction ran (an ordinary store starts at 10)", level0Tables(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(s.db.Tables()) - level0Tables(s); n != 0 {
		t.Fatalf("bulk load compacted %d tables below level 0", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.BulkLoad = false
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for level0Tables(s) > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("reopened store still has %d level-0 tables after a minute", level0Tables(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := names(t, s.Reader(ReaderOptions{}), "app=web"); len(got) != 25000/len(benchdata.Apps) {
		t.Fatalf("after compaction, app=web lists %d Pods, want %d", len(got), 25000/len(benchdata.Apps))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestScopedGet reads a Pod held by c1, c2 and c3 as callers of several
// scopes: only visible copies count, and a hidden object is not found with
// the message of a missing one.
func TestScopedGet(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	for _, c := range []string{"c1", "c2", "c3"} {
		if err := s.Apply(context.Background(), c, []feed.Event{ev(1, benchdata.Event(c, 0, 1))}, 1); err != nil {
			t.Fatal(err)
		}
	}
	ns, name := benchdata.Namespace(0), benchdata.PodName(0)
	only := func(clusters ...string) *query.Visibility {
		return &query.Visibility{Grants: []query.Grant{{Clusters: clusters}}}
	}
	inNamespace := func(n string) *query.Visibility {
		return &query.Visibility{Grants: []query.Grant{{Namespaces: []string{n}}}}
	}
	missing := `pods "` + name + `" not found`
	for _, tc := range []struct {
		label   string
		cluster string
		vis     *query.Visibility
		from    string // the cluster answering, else the error
		err     string
	}{
		{"everything visible: ambiguous", "", nil, "", `ambiguous object: pods "` + ns + "/" + name + `" found in clusters [c1, c2, c3]`},
		{"one visible copy is the answer", "", only("c2", "c4"), "c2", ""},
		{"the ambiguity names visible clusters only", "", only("c1", "c3", "c4"), "", "found in clusters [c1, c3]"},
		{"no visible copy", "", only("c4"), "", missing},
		{"qualified, hidden cluster", "c1", only("c2"), "", missing},
		{"qualified, visible cluster", "c1", only("c1"), "c1", ""},
		{"namespace visible everywhere", "", inNamespace(ns), "", "[c1, c2, c3]"},
		{"namespace hidden", "", inNamespace("elsewhere"), "", missing},
		{"qualified, namespace hidden", "c2", inNamespace("elsewhere"), "", missing},
	} {
		t.Run(tc.label, func(t *testing.T) {
			o, err := r.Get(context.Background(), query.GetOptions{GVR: benchdata.PodGVR, Namespace: ns, Name: name, Cluster: tc.cluster, Visible: tc.vis})
			if tc.from != "" {
				if err != nil || o.Cluster != tc.from || !bytes.Contains(o.JSON, []byte(name)) {
					t.Fatalf("got %s %v, want the copy in %s", o.Cluster, err, tc.from)
				}
				return
			}
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
			if tc.err == missing && (err.Error() != missing || !errors.Is(err, query.ErrNotFound)) {
				t.Fatalf("hidden object: %q, want exactly the missing one's %q", err, missing)
			}
		})
	}
	_, err = r.Get(context.Background(), query.GetOptions{GVR: benchdata.PodGVR, Namespace: ns, Name: "nope"})
	if want := `pods "nope" not found`; err == nil || err.Error() != want {
		t.Fatalf("missing object: %v, want %q", err, want)
	}
}

// TestListCarriesRowSpans: a list's objects come with the row spans the
// store found as it wrote them, and they are the spans of the bytes
// listed, so a Table row can use them without reading the object.
func TestListCarriesRowSpans(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seq uint64
	applyPods(t, s, 20, 1, 7, &seq)
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	p, err := r.List(context.Background(), query.ListOptions{GVR: benchdata.PodGVR})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 20 {
		t.Fatalf("%d items, want 20", len(p.Items))
	}
	for _, o := range p.Items {
		want, err := rawjson.FindRowSpans(o.JSON, stream.ClusterAnnotation)
		if err != nil {
			t.Fatal(err)
		}
		if o.Row != want || o.Row.Metadata == (rawjson.Span{}) || o.Row.Annotation == (rawjson.Span{}) {
			t.Fatalf("row spans %+v, want %+v of the listed bytes", o.Row, want)
		}
	}
}

// Badger is a store the backend set can hold.
var _ store.Backend = (*Backend)(nil)
