package badger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var histPods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// t0 is the tests' clock: change i happens at t0 + i seconds.
var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func podJSON(uid, name string, rv int, tier, phase string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"ns","uid":%q,"resourceVersion":"%d","labels":{"app":"web","tier":%q}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}],"nodeName":"node-1"},"status":{"phase":%q,"conditions":[{"type":"Ready","status":"False"}]}}`,
		name, uid, rv, tier, phase)
}

func podUpsert(seq uint64, uid, name string, rv int, tier, phase string, at int) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Kind: "Pod", Uid: uid, Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(rv), Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT,
		Object: podJSON(uid, name, rv, tier, phase), ObservedUnixNano: t0.Add(time.Duration(at) * time.Second).UnixNano(), Namespaced: true,
		Manager: "kubelet", Operation: "Update", Subresource: "status"}}
}

func podDelete(seq uint64, uid, name string, rv, at int) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Kind: "Pod", Uid: uid, Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(rv), Type: fleetviewv1.EventType_EVENT_TYPE_DELETE,
		ObservedUnixNano: t0.Add(time.Duration(at) * time.Second).UnixNano(), Namespaced: true}}
}

func openHistory(t testing.TB, h HistoryOptions) (*Store, *Reader) {
	t.Helper()
	if h.Retention == 0 {
		h.Retention = 24 * time.Hour
	}
	if h.MaxBytes == 0 {
		h.MaxBytes = 1 << 30
	}
	h.RetainInterval = -1 // the tests call Retain themselves, at their clock
	s, err := Open(Options{Dir: t.TempDir(), History: h, ValueLogGCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Reader(ReaderOptions{})
	t.Cleanup(func() {
		r.Close()
		s.Close()
	})
	// The window starts when the store first kept history: the tests'
	// clock is in the past, so move the start to it.
	if err := s.db.Update(func(txn *bdg.Txn) error {
		return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(t0.Add(-time.Hour).UnixNano())))
	}); err != nil {
		t.Fatal(err)
	}
	return s, r
}

func apply(t *testing.T, s *Store, evs ...feed.Event) {
	t.Helper()
	if err := s.Apply(context.Background(), "c1", evs, evs[len(evs)-1].Seq); err != nil {
		t.Fatal(err)
	}
}

// storedKinds are the kinds of the uid's stored revisions, oldest first,
// by what each keeps of the state before it: f nothing (the first kept),
// p a reverse patch, s the state whole; o a revision holding its own
// state (a delete).
func storedKinds(t *testing.T, s *Store, uid string) string {
	t.Helper()
	var out strings.Builder
	if err := s.db.View(func(txn *bdg.Txn) error {
		return eachRevision(txn, "c1", histPods, uid, func(_ uint64, r revision, _ []byte) (bool, error) {
			switch {
			case r.own != nil:
				out.WriteByte('o')
			case r.prev == nil:
				out.WriteByte('f')
			case r.prevWhole:
				out.WriteByte('s')
			default:
				out.WriteByte('p')
			}
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func revisionsOf(t *testing.T, r *Reader, name string) []query.Revision {
	t.Helper()
	p, err := r.Revisions(context.Background(), query.RevisionsOptions{Object: query.GetOptions{GVR: histPods, Cluster: "c1", Namespace: "ns", Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	return p.Revisions
}

func TestHistoryRevisions(t *testing.T) {
	s, r := openHistory(t, HistoryOptions{SnapshotEvery: 4})
	var want []feed.Event
	seq := uint64(0)
	next := func(rv int, tier, phase string) feed.Event {
		seq++
		e := podUpsert(seq, "u1", "p1", rv, tier, phase, int(seq))
		want = append(want, e)
		return e
	}
	apply(t, s, next(1, "a", "Pending"), next(2, "b", "Pending")) // added, a one-label change
	apply(t, s, next(3, "b", "Running"))                          // a status change, alone in its batch
	apply(t, s, next(4, "b", "Failed"), next(5, "c", "Running"), next(6, "c", "Succeeded"), next(7, "d", "Succeeded"))
	// A redelivery of the last version (same resourceVersion) records nothing.
	seq++
	apply(t, s, podUpsert(seq, "u1", "p1", 7, "d", "Succeeded", int(seq)))

	revs := revisionsOf(t, r, "p1")
	if len(revs) != len(want) {
		t.Fatalf("%d revisions, want %d", len(revs), len(want))
	}
	for i, rev := range revs {
		w := want[i].Event
		if string(rev.Object) != string(w.GetObject()) {
			t.Errorf("revision %d object\n%s\nwant\n%s", i, rev.Object, w.GetObject())
		}
		wantType := query.ChangeModified
		if i == 0 {
			wantType = query.ChangeAdded
		}
		if rev.Type != wantType || rev.ResourceVersion != w.GetResourceVersion() || rev.Seq != want[i].Seq || rev.Manager != "kubelet" ||
			rev.Operation != "Update" || rev.Subresource != "status" || !rev.Time.Equal(time.Unix(0, w.GetObservedUnixNano())) {
			t.Errorf("revision %d: %+v", i, rev.Change)
		}
		if i == 0 && rev.Patch != nil {
			t.Errorf("first revision has a patch %s", rev.Patch)
		}
		if i > 0 && (rev.Patch == nil || len(rev.Patch) > 120) {
			t.Errorf("revision %d patch %s: want a small one", i, rev.Patch)
		}
	}
	if got := string(revs[1].Patch); got != `{"metadata":{"resourceVersion":"2","labels":{"tier":"b"}}}` {
		t.Errorf("label change patch %s", got)
	}
	// A snapshot every 4 revisions: 3 patches at most in a row.
	if got := storedKinds(t, s, "u1"); got != "fpppspp" {
		t.Errorf("stored kinds %q, want fpppspp", got)
	}

	// The delete's revision holds the last state.
	seq++
	apply(t, s, podDelete(seq, "u1", "p1", 8, int(seq)))
	revs = revisionsOf(t, r, "p1")
	last := revs[len(revs)-1]
	if last.Type != query.ChangeDeleted || string(last.Object) != string(want[len(want)-1].Event.GetObject()) || last.Patch != nil {
		t.Errorf("delete revision %+v object %s patch %s", last.Change, last.Object, last.Patch)
	}
	if last.Labels["tier"] != "d" {
		t.Errorf("delete revision labels %v", last.Labels)
	}
}

func TestHistoryChanges(t *testing.T) {
	s, r := openHistory(t, HistoryOptions{})
	apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 1), podUpsert(2, "u2", "p2", 2, "b", "Pending", 2),
		podUpsert(3, "u1", "p1", 3, "b", "Running", 3))
	apply(t, s, podDelete(4, "u2", "p2", 4, 4), podUpsert(5, "u3", "q3", 5, "a", "Pending", 5))
	ctx := context.Background()
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cases := []struct {
		name string
		o    query.ChangesOptions
		want []uint64
	}{
		{"all", query.ChangesOptions{}, []uint64{1, 2, 3, 4, 5}},
		{"since, until", query.ChangesOptions{Since: t0.Add(2 * time.Second), Until: t0.Add(4 * time.Second)}, []uint64{2, 3}},
		{"deletes", query.ChangesOptions{Types: []query.ChangeType{query.ChangeDeleted}}, []uint64{4}},
		{"added", query.ChangesOptions{Types: []query.ChangeType{query.ChangeAdded}}, []uint64{1, 2, 5}},
		{"labels after the change", query.ChangesOptions{Labels: sel("tier=b")}, []uint64{2, 3, 4}},
		{"other cluster", query.ChangesOptions{Clusters: []string{"c2"}}, nil},
		{"other namespace", query.ChangesOptions{Namespace: "x"}, nil},
		{"other resource", query.ChangesOptions{Resources: []schema.GroupResource{{Resource: "configmaps"}}}, nil},
		{"invisible", query.ChangesOptions{Visible: &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"x"}}}}}, nil},
		{"visible", query.ChangesOptions{Visible: &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"ns"}}}}}, []uint64{1, 2, 3, 4, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint64
			o := tc.o
			o.Limit = 2
			for pages := 0; ; pages++ {
				p, err := r.Changes(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range p.Changes {
					got = append(got, c.Seq)
				}
				if p.Continue == "" || pages > 5 {
					break
				}
				o.Continue = p.Continue
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("seqs %v, want %v", got, tc.want)
			}
		})
	}
	// The recently deleted view: a delete with its last state.
	p, err := r.Changes(ctx, query.ChangesOptions{Types: []query.ChangeType{query.ChangeDeleted}, Objects: true})
	if err != nil || len(p.Changes) != 1 || string(p.Changes[0].Object) != string(podJSON("u2", "p2", 2, "b", "Pending")) {
		t.Fatalf("deleted view %+v, %v", p, err)
	}
	// A resumed watch's replay, with the objects.
	var got []string
	if err := r.ChangesAfter(ctx, "c1", histPods, 1, 4, func(rev query.Revision) error {
		got = append(got, fmt.Sprintf("%d %s %s/%s rv%s", rev.Seq, rev.Type, rev.Namespace, rev.Name, rev.ResourceVersion))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"2 ADDED ns/p2 rv2", "3 MODIFIED ns/p1 rv3", "4 DELETED ns/p2 rv4"}; !slices.Equal(got, want) {
		t.Errorf("ChangesAfter %v, want %v", got, want)
	}
}

func TestHistoryAsOf(t *testing.T) {
	s, r := openHistory(t, HistoryOptions{})
	ctx := context.Background()
	// p1: added at 1 (tier a), relabelled at 5 (tier b).
	// p2: added at 2, deleted at 6, its name reused by a new uid at 8.
	// p3: added at 7.
	apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 1), podUpsert(2, "u2", "p2", 2, "a", "Running", 2))
	apply(t, s, podUpsert(3, "u1", "p1", 3, "b", "Running", 5), podDelete(4, "u2", "p2", 4, 6))
	apply(t, s, podUpsert(5, "u3", "p3", 5, "a", "Pending", 7), podUpsert(6, "u4", "p2", 6, "c", "Pending", 8))
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	cases := []struct {
		name string
		at   int
		sel  string
		want map[string]string // name -> resourceVersion
	}{
		{"before everything", 0, "", map[string]string{}},
		{"after the adds", 3, "", map[string]string{"p1": "1", "p2": "2"}},
		{"selector on the state then", 3, "tier=a", map[string]string{"p1": "1", "p2": "2"}},
		{"label changed after t", 3, "tier=b", map[string]string{}},
		{"after the relabel, before the delete", 5, "tier=b", map[string]string{"p1": "3"}},
		{"after the delete", 6, "", map[string]string{"p1": "3"}},
		{"name reused", 9, "", map[string]string{"p1": "3", "p2": "6", "p3": "5"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			p, err := r.List(ctx, query.ListOptions{GVR: histPods, Labels: sel, AsOf: at(tc.at)})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, o := range p.Items {
				_, _, name, _ := objectMeta(o.JSON)
				got[name] = rvOf(t, o.JSON)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("as-of list %v, want %v", got, tc.want)
			}
			for name, rv := range tc.want {
				o, err := r.Get(ctx, query.GetOptions{GVR: histPods, Namespace: "ns", Name: name, AsOf: at(tc.at)})
				if err != nil || rvOf(t, o.JSON) != rv || o.Cluster != "c1" {
					t.Errorf("as-of get %s: %v rv %s, want %s", name, err, o.JSON, rv)
				}
			}
		})
	}
	if _, err := r.Get(ctx, query.GetOptions{GVR: histPods, Namespace: "ns", Name: "p3", AsOf: at(3)}); !isNotFound(err) {
		t.Errorf("as-of get of an object created later: %v, want not found", err)
	}
	if _, err := r.Get(ctx, query.GetOptions{GVR: histPods, Namespace: "ns", Name: "p1", AsOf: t0.Add(-2 * time.Hour)}); !errors.Is(err, query.ErrOutsideWindow) {
		t.Errorf("as-of before the window: %v", err)
	}
	// Paged.
	p, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: at(9), Limit: 2})
	if err != nil || len(p.Items) != 2 || p.Continue == "" {
		t.Fatalf("first page %d items, %q, %v", len(p.Items), p.Continue, err)
	}
	p2, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: at(9), Limit: 2, Continue: p.Continue})
	if err != nil || len(p2.Items) != 1 || p2.Continue != "" {
		t.Fatalf("second page %d items, %q, %v", len(p2.Items), p2.Continue, err)
	}
}

func rvOf(t *testing.T, obj []byte) string {
	t.Helper()
	i := strings.Index(string(obj), `"resourceVersion":"`)
	if i < 0 {
		t.Fatalf("no resourceVersion in %s", obj)
	}
	rest := string(obj[i+19:])
	return rest[:strings.IndexByte(rest, '"')]
}

func isNotFound(err error) bool { return errors.Is(err, query.ErrNotFound) }

func TestHistoryRetention(t *testing.T) {
	type step struct {
		now      int // seconds after t0
		maxBytes int64
	}
	cases := []struct {
		name string
		step step
		// kinds are p1's stored revisions after retention; objects the
		// resourceVersions its revisions still read as.
		kinds string
		rvs   []string
		// p2 (deleted at 4) still has revisions.
		p2 bool
	}{
		{"nothing expired", step{now: 0}, "fpppp", []string{"1", "3", "5", "6", "7"}, true},
		// At 3+window: the revisions of 1 and 3 (at 1 and 3 s) go; 5's
		// state still comes from the newer ones (its patch back to 3 is
		// left unused).
		{"by time", step{now: 3}, "ppp", []string{"5", "6", "7"}, true},
		// Past every change: the newest revision of the live p1 stays,
		// p2's history is gone.
		{"all expired", step{now: 10}, "p", []string{"7"}, false},
		{"by bytes", step{now: -100, maxBytes: 1}, "p", []string{"7"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, r := openHistory(t, HistoryOptions{Retention: time.Hour, MaxBytes: cmpOr(tc.step.maxBytes, 1<<30)})
			apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 1), podUpsert(2, "u2", "p2", 2, "a", "Pending", 2))
			apply(t, s, podUpsert(3, "u1", "p1", 3, "b", "Pending", 3), podDelete(4, "u2", "p2", 4, 4))
			apply(t, s, podUpsert(5, "u1", "p1", 5, "b", "Running", 5), podUpsert(6, "u1", "p1", 6, "c", "Running", 6), podUpsert(7, "u1", "p1", 7, "c", "Failed", 7))
			before, err := s.historyBytes()
			if err != nil || before <= 0 {
				t.Fatalf("history bytes %d, %v", before, err)
			}
			if err := s.Retain(context.Background(), t0.Add(time.Hour+time.Duration(tc.step.now)*time.Second)); err != nil {
				t.Fatal(err)
			}
			if got := storedKinds(t, s, "u1"); got != tc.kinds {
				t.Errorf("p1 stored kinds %q, want %q", got, tc.kinds)
			}
			var rvs []string
			for _, rev := range revisionsOf(t, r, "p1") {
				if want := podJSONAt(t, rev.ResourceVersion); string(rev.Object) != want {
					t.Errorf("revision rv %s object %s, want %s", rev.ResourceVersion, rev.Object, want)
				}
				rvs = append(rvs, rev.ResourceVersion)
			}
			if !slices.Equal(rvs, tc.rvs) {
				t.Errorf("p1 revisions %v, want %v", rvs, tc.rvs)
			}
			if got := len(revisionsOf(t, r, "p2")) > 0; got != tc.p2 {
				t.Errorf("p2 has revisions: %v, want %v", got, tc.p2)
			}
			after, err := s.historyBytes()
			if err != nil {
				t.Fatal(err)
			}
			if tc.kinds != "fpppp" && after >= before {
				t.Errorf("history bytes %d after retention, %d before", after, before)
			}
			// The next change of p1 after its kept newest expired is the
			// first kept, and the expired one goes.
			if len(tc.rvs) == 1 {
				apply(t, s, podUpsert(8, "u1", "p1", 8, "d", "Failed", 8))
				if got := storedKinds(t, s, "u1"); got != "f" {
					t.Errorf("after the next change, stored kinds %q, want f", got)
				}
			}
		})
	}
}

// podJSONAt is the p1 object the retention test wrote at resourceVersion rv.
func podJSONAt(t *testing.T, rv string) string {
	states := map[string][2]string{"1": {"a", "Pending"}, "3": {"b", "Pending"}, "5": {"b", "Running"}, "6": {"c", "Running"}, "7": {"c", "Failed"}, "8": {"d", "Failed"}}
	st, ok := states[rv]
	if !ok {
		t.Fatalf("no state at rv %s", rv)
	}
	var n int
	fmt.Sscan(rv, &n)
	return string(podJSON("u1", "p1", n, st[0], st[1]))
}

func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

// TestHistoryStateLeavesWithoutDelete: an object's newest revision stores
// no state (its record is it); when the record goes without a delete
// recorded, its name reused by a new uid or its resource removed, the
// revision keeps the state, also while the batch that wrote it is still
// in flight.
func TestHistoryStateLeavesWithoutDelete(t *testing.T) {
	removed := feed.Event{Seq: 3, Event: &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}}
	cases := []struct {
		name  string
		then  feed.Event
		kinds string
	}{
		{"name reused", podUpsert(3, "u9", "p1", 3, "x", "Pending", 3), "fo"},
		{"resource removed", removed, "fo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, r := openHistory(t, HistoryOptions{})
			ctx := context.Background()
			first := []feed.Event{podUpsert(1, "u1", "p1", 1, "a", "Pending", 1), podUpsert(2, "u1", "p1", 2, "b", "Running", 2)}
			p1, err := s.Prepare(ctx, "c1", first, 2)
			if err != nil {
				t.Fatal(err)
			}
			// The second batch is made while the first is in flight.
			done := p1.Commit()
			p2, err := s.Prepare(ctx, "c1", []feed.Event{tc.then}, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := <-p2.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := storedKinds(t, s, "u1"); got != tc.kinds {
				t.Errorf("stored kinds %q, want %q", got, tc.kinds)
			}
			page, err := r.Revisions(ctx, query.RevisionsOptions{UID: "u1", Object: query.GetOptions{GVR: histPods, Cluster: "c1", Namespace: "ns", Name: "p1"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Revisions) != len(first) {
				t.Fatalf("%d revisions of u1, want %d", len(page.Revisions), len(first))
			}
			for i, rev := range page.Revisions {
				if want := first[i].Event.GetObject(); string(rev.Object) != string(want) {
					t.Errorf("revision %d object\n%s\nwant\n%s", i, rev.Object, want)
				}
			}
		})
	}
}
