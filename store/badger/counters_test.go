package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// counterEvents makes the events of the counter tests.
type counterEvents struct{}

func (counterEvents) pod(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	return countPod(cluster, i, rv)
}

// reusedPod is Pod i under a new uid (its name taken by a new object).
func (counterEvents) reusedPod(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	e := countPod(cluster, i, rv)
	uid := fmt.Sprintf("reused-%d-%d", i, rv)
	e.Object = bytes.Replace(e.Object, []byte(e.Uid), []byte(uid), 1)
	e.Uid = uid
	return e
}

func (counterEvents) configMap(cluster string, i int) *fleetviewv1.ResourceEvent {
	ns, name := benchdata.Namespace(i), fmt.Sprintf("cm-%d", i)
	uid := cluster + "-cm-" + name
	obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"uid":%q},"data":{"a":"b"}}`, name, ns, uid)
	return &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(cmGVR), Kind: "ConfigMap", Uid: uid, Namespace: ns, Name: name,
		ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(obj), Namespaced: true}
}

func (counterEvents) removed(cluster string, gvr schema.GroupVersionResource) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(gvr), Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}
}

// counterKeys is every C/ key of the store and its count.
func counterKeys(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'C', sep}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recount is what the counters must hold, counted from the objects' o/
// keys and their value index entries (X/).
func recount(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	gvrOf := func(k []byte) (schema.GroupVersionResource, []byte) {
		p := bytes.SplitN(k[2:], []byte{sep}, 4)
		return schema.GroupVersionResource{Group: string(p[0]), Version: string(p[1]), Resource: string(p[2])}, k
	}
	err := s.db.View(func(txn *bdg.Txn) error {
		for _, fam := range []byte{'o', 'X'} {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{fam, sep}})
			for it.Rewind(); it.Valid(); it.Next() {
				gvr, k := gvrOf(it.Item().Key())
				ns, _, cluster, err := tail(k)
				if err != nil {
					it.Close()
					return err
				}
				if fam == 'o' {
					out[string(counterKey(gvr, "", cluster, ns, ""))]++
					continue
				}
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					it.Close()
					return err
				}
				ps, err := decodePairs(v)
				if err != nil {
					it.Close()
					return err
				}
				for _, p := range ps {
					out[string(counterKey(gvr, p.dim, cluster, ns, p.value))]++
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fmtCounters(m map[string]int64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%q=%d", k, m[k]))
	}
	return strings.Join(out, "\n")
}

// checkRecount fails unless the counters equal a recount, none below one.
func checkRecount(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	got, want := counterKeys(t, s), recount(t, s)
	for k, n := range got {
		if n <= 0 {
			t.Errorf("counter %q = %d", k, n)
		}
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, int64) bool) {
		for k, n := range got {
			yield(k, n)
		}
		for k, n := range want {
			yield(k, n)
		}
	}))) {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%q: %d, recount %d", k, got[k], want[k]))
		}
	}
	if len(diff) > 0 {
		t.Fatalf("counters differ from a recount:\n%s", strings.Join(diff, "\n"))
	}
	if len(want) == 0 {
		return want
	}
	if !s.counters {
		t.Fatal("counters off")
	}
	return want
}

// applyVia applies one batch of a cluster, pipelined (Prepare, Commit)
// or not; the pipelined batch commits after the next is prepared.
type batchApplier struct {
	t         *testing.T
	s         *Store
	pipelined bool
	seq       map[string]uint64
	pending   map[string]<-chan error
	log       []feed.Event // every event applied, in order, by cluster
	clusters  []string
}

func (b *batchApplier) apply(cluster string, evs ...*fleetviewv1.ResourceEvent) {
	b.t.Helper()
	fe := make([]feed.Event, len(evs))
	for i, e := range evs {
		b.seq[cluster]++
		fe[i] = ev(b.seq[cluster], e)
	}
	if !slices.Contains(b.clusters, cluster) {
		b.clusters = append(b.clusters, cluster)
	}
	b.log = append(b.log, fe...)
	ctx := context.Background()
	if !b.pipelined {
		if err := b.s.Apply(ctx, cluster, fe, b.seq[cluster]); err != nil {
			b.t.Fatal(err)
		}
		return
	}
	p, err := b.s.Prepare(ctx, cluster, fe, b.seq[cluster])
	if err != nil {
		b.t.Fatal(err)
	}
	if prev := b.pending[cluster]; prev != nil {
		if err := <-prev; err != nil {
			b.t.Fatal(err)
		}
	}
	b.pending[cluster] = p.Commit()
}

func (b *batchApplier) wait() {
	b.t.Helper()
	for c, ch := range b.pending {
		if err := <-ch; err != nil {
			b.t.Fatal(err)
		}
		delete(b.pending, c)
	}
}

// TestCountersEqualRecount: after adds, updates that change phases and
// images or nothing, deletes, names reused by new uids, a resource
// removed, a cluster removed (every resource of it), batches split for
// their size (small memtables) and pipelined batches, the counters equal
// a recount of the objects, and a rebuild (every event replayed into a
// fresh store) holds the same counters.
func TestCountersEqualRecount(t *testing.T) {
	var e counterEvents
	steps := []struct {
		name string
		do   func(b *batchApplier)
	}{
		{"adds", func(b *batchApplier) {
			for _, c := range []string{"a", "b", "c"} {
				var evs []*fleetviewv1.ResourceEvent
				for i := range 120 {
					evs = append(evs, e.pod(c, i, 1))
				}
				for i := range 20 {
					evs = append(evs, e.configMap(c, i))
				}
				b.apply(c, evs...)
			}
		}},
		{"updates: phases and images move, some keep both", func(b *batchApplier) {
			var evs []*fleetviewv1.ResourceEvent
			for i := 0; i < 120; i += 2 {
				evs = append(evs, e.pod("a", i, 2), e.pod("a", i, 6)) // rv 6 has rv 2's phase
			}
			b.apply("a", evs...)
		}},
		{"deletes, a Pod added and deleted in one batch, a delete of nothing", func(b *batchApplier) {
			evs := []*fleetviewv1.ResourceEvent{e.pod("b", 500, 1), benchdata.Delete("b", 500, 2), benchdata.Delete("b", 900, 1)}
			for i := 1; i < 120; i += 5 {
				evs = append(evs, benchdata.Delete("b", i, 3))
			}
			b.apply("b", evs...)
		}},
		{"names reused by new uids", func(b *batchApplier) {
			var evs []*fleetviewv1.ResourceEvent
			for i := 0; i < 120; i += 9 {
				evs = append(evs, e.reusedPod("c", i, 3))
			}
			b.apply("c", evs...)
		}},
		{"a resource removed", func(b *batchApplier) { b.apply("a", e.removed("a", benchdata.PodGVR)) }},
		{"a cluster removed: every resource", func(b *batchApplier) {
			b.apply("c", e.removed("c", benchdata.PodGVR), e.removed("c", cmGVR))
		}},
		{"the resource back", func(b *batchApplier) {
			var evs []*fleetviewv1.ResourceEvent
			for i := range 60 {
				evs = append(evs, e.pod("a", i, 4))
			}
			b.apply("a", evs...)
		}},
	}
	for _, mode := range []struct {
		name      string
		memtable  int64
		pipelined bool
	}{{"apply", 0, false}, {"pipelined", 0, true}, {"split batches", 1 << 20, false}} {
		t.Run(mode.name, func(t *testing.T) {
			s, err := Open(Options{Dir: t.TempDir(), MemTableSize: mode.memtable})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			b := &batchApplier{t: t, s: s, pipelined: mode.pipelined, seq: map[string]uint64{}, pending: map[string]<-chan error{}}
			for _, st := range steps {
				st.do(b)
				b.wait()
				want := checkRecount(t, s)
				if st.name == "a cluster removed: every resource" {
					for k := range want {
						if strings.Contains(k, "\x00c\x00") {
							t.Fatalf("after %s: counter %q of the removed cluster", st.name, k)
						}
					}
				}
			}
			// A rebuild: every event replayed into a fresh store, one
			// batch per cluster.
			fresh, err := Open(Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			for _, c := range b.clusters {
				var evs []feed.Event
				for _, fe := range b.log {
					if fe.Event.GetCluster() == c {
						evs = append(evs, feed.Event{Seq: fe.Seq, Event: fe.Event})
					}
				}
				if err := fresh.Apply(context.Background(), c, evs, evs[len(evs)-1].Seq); err != nil {
					t.Fatal(err)
				}
			}
			if g, w := fmtCounters(counterKeys(t, fresh)), fmtCounters(counterKeys(t, s)); g != w {
				t.Fatalf("rebuilt counters:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

// TestCountersRandomSequence: random adds, updates, deletes and removals
// over two clusters, in random batches, keep the counters equal to a
// recount, and counts served from them equal those the indexes give.
func TestCountersRandomSequence(t *testing.T) {
	var e counterEvents
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 49))
			s, err := Open(Options{Dir: t.TempDir(), MemTableSize: 2 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			b := &batchApplier{t: t, s: s, pipelined: seed%2 == 1, seq: map[string]uint64{}, pending: map[string]<-chan error{}}
			for round := range 12 {
				c := []string{"x", "y"}[rng.IntN(2)]
				var evs []*fleetviewv1.ResourceEvent
				for range 1 + rng.IntN(150) {
					i, rv := rng.IntN(80), 1+rng.IntN(8)
					switch r := rng.IntN(20); {
					case r < 12:
						evs = append(evs, e.pod(c, i, rv))
					case r < 15:
						evs = append(evs, benchdata.Delete(c, i, rv))
					case r < 17:
						evs = append(evs, e.reusedPod(c, i, rv))
					case r < 19:
						evs = append(evs, e.configMap(c, i))
					default:
						evs = append(evs, e.removed(c, []schema.GroupVersionResource{benchdata.PodGVR, cmGVR}[rng.IntN(2)]))
					}
				}
				b.apply(c, evs...)
				if round%3 == 2 {
					b.wait()
					checkRecount(t, s)
				}
			}
			b.wait()
			checkRecount(t, s)
			r := s.Reader(ReaderOptions{})
			defer r.Close()
			restricted := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"x"}, Namespaces: []string{"team-01", "team-04"}}}}
			for _, by := range [][]string{{"cluster", "field:status.phase"}, {"image"}, {"namespace", "kind"}} {
				o := query.CountOptions{GVR: benchdata.PodGVR, By: dims(t, by...), Visible: restricted}
				got, err := r.Count(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				c := counter{o: &o, txn: s.db.NewTransaction(false), gvr: o.GVR, gr: o.GVR.GroupResource(), t: query.NewTally(), vi: s.vindex}
				err = c.indexed()
				c.txn.Discard()
				if err != nil {
					t.Fatal(err)
				}
				if g, w := rowsText(got), rowsText(c.t.Counts("")); g != w || got.Scanned != "counters" {
					t.Errorf("by %v: counters (%s):\n%s\nindexes:\n%s", by, got.Scanned, g, w)
				}
			}
		})
	}
}

// TestCountersKeptSinceEmpty: counters answer only when kept since the
// store was empty and no binary that does not keep them wrote since: a
// store written without them (NoCounters, or a binary that predates them
// and so leaves their marker alone) counts from its indexes when reopened
// with them; one that kept them, reopened (also after such a binary only
// read it, or after every object went while they were off), still
// answers from them.
func TestCountersKeptSinceEmpty(t *testing.T) {
	var e counterEvents
	type open struct {
		mode  string // "on", "off" (NoCounters), "unaware" (a binary that predates counters)
		write string // "add", "delete" (every Pod added so far), ""
	}
	for _, tc := range []struct {
		name  string
		opens []open
		want  string
	}{
		{"kept, reopened", []open{{"on", "add"}, {"on", "add"}}, "counters"},
		{"written without, reopened with", []open{{"off", "add"}, {"on", "add"}}, "index"},
		{"kept, then written without, reopened with", []open{{"on", "add"}, {"off", "add"}}, "index"},
		{"kept, then written by an older binary, reopened with", []open{{"on", "add"}, {"unaware", "add"}}, "index"},
		{"kept, then written by an older binary, reopened with twice", []open{{"on", "add"}, {"unaware", "add"}, {"on", "add"}}, "index"},
		{"kept, then opened by an older binary that wrote nothing", []open{{"on", "add"}, {"unaware", ""}, {"on", "add"}}, "counters"},
		{"kept, older binary wrote, emptied, counted again", []open{{"on", "add"}, {"unaware", "add"}, {"off", "delete"}, {"on", "add"}, {"on", "add"}}, "counters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var seq uint64
			added, live := 0, 0
			for _, op := range append(tc.opens, open{"on", ""}) {
				s, err := Open(Options{Dir: dir, NoCounters: op.mode == "off", unaware: op.mode == "unaware"})
				if err != nil {
					t.Fatal(err)
				}
				var evs []feed.Event
				switch op.write {
				case "add":
					seq++
					evs = append(evs, ev(seq, e.pod("a", added, 1)))
					added++
					live++
				case "delete":
					for i := range added {
						seq++
						evs = append(evs, ev(seq, benchdata.Delete("a", i, 2)))
					}
					live = 0
				}
				if len(evs) > 0 {
					if err := s.Apply(context.Background(), "a", evs, seq); err != nil {
						t.Fatal(err)
					}
				}
				if op.write == "" && op.mode == "on" {
					r := s.Reader(ReaderOptions{})
					got, err := r.Count(context.Background(), query.CountOptions{GVR: benchdata.PodGVR, By: dims(t, "field:status.phase")})
					r.Close()
					if err != nil {
						t.Fatal(err)
					}
					if got.Scanned != tc.want || got.Total != int64(live) {
						t.Errorf("scanned %q total %d, want %q %d", got.Scanned, got.Total, tc.want, live)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCountersAfterOlderBinaryHalfRemoval: a binary that predates the
// counters, stopped halfway through a removal too big for one
// transaction, committed deletes that move no checkpoint (so the stamp
// does not tell); the replayed removal leaves no counter of the resource,
// and counts still come from the counters.
func TestCountersAfterOlderBinaryHalfRemoval(t *testing.T) {
	var e counterEvents
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var evs []feed.Event
	for i := range 40 {
		evs = append(evs, ev(uint64(i+1), e.pod("a", i, 1)))
	}
	evs = append(evs, ev(41, e.configMap("a", 1)))
	if err := s.Apply(ctx, "a", evs, 41); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The older binary: half the Pods deleted by the removal's first part.
	old, err := Open(Options{Dir: dir, unaware: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := old.newWriter(ctx, "a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := w.deleteUID(benchdata.PodGVR, benchdata.UID("a", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.counters {
		t.Fatal("counters not trusted: no checkpoint moved")
	}
	if err := s.Apply(ctx, "a", []feed.Event{ev(42, e.removed("a", benchdata.PodGVR))}, 42); err != nil {
		t.Fatal(err)
	}
	want := checkRecount(t, s)
	for k := range want {
		if strings.Contains(k, "\x00pods\x00") {
			t.Fatalf("counter %q of the removed resource", k)
		}
	}
	if len(want) == 0 {
		t.Fatal("no counter left: the ConfigMap's should be")
	}
}
