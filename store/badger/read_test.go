package badger

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func fill(t *testing.T, s *Store, cluster string, from, to int, seq uint64) uint64 {
	t.Helper()
	var evs []feed.Event
	for i := from; i < to; i++ {
		seq++
		evs = append(evs, ev(seq, benchdata.Event(cluster, i, 1)))
	}
	if err := s.Apply(context.Background(), cluster, evs, seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// openStore opens a store in a temporary directory, closed when the test
// ends.
func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openReader opens a store in a temporary directory and a reader of it,
// both closed when the test ends.
func openReader(t *testing.T) (*Store, *Reader) {
	t.Helper()
	s := openStore(t)
	r := s.Reader(ReaderOptions{})
	t.Cleanup(func() { r.Close() })
	return s, r
}

// TestListPagesReadOneSnapshot: later pages come from the first page's
// snapshot while the store changes; the snapshot expires after its TTL.
func TestListPagesReadOneSnapshot(t *testing.T) {
	s := openStore(t)
	r := s.Reader(ReaderOptions{SnapshotTTL: time.Minute})
	defer r.Close()
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()
	seq := fill(t, s, "c1", 0, 40, 0)
	o := query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 15}
	p1, err := r.List(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Items) != 15 || p1.Continue == "" || p1.Remaining == nil || *p1.Remaining != 25 {
		t.Fatalf("first page: %d items, continue %q, remaining %v", len(p1.Items), p1.Continue, p1.Remaining)
	}
	// The store moves on: 40 more objects and a new cluster.
	fill(t, s, "c1", 40, 80, seq)
	fill(t, s, "c2", 0, 10, 0)
	total := len(p1.Items)
	o.Continue = p1.Continue
	for o.Continue != "" {
		p, err := r.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if p.Version["c1"] != p1.Version["c1"] || len(p.Version) != 1 {
			t.Fatalf("page version %v, first page %v", p.Version, p1.Version)
		}
		total += len(p.Items)
		o.Continue = p.Continue
	}
	if total != 40 {
		t.Fatalf("paged %d objects, the snapshot held 40", total)
	}
	fresh, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything()})
	if err != nil || len(fresh.Items) != 90 {
		t.Fatalf("a new list sees the new state: %d %v", len(fresh.Items), err)
	}
	// Expiry.
	p1, err = r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 5, Continue: p1.Continue}); !errors.Is(err, query.ErrExpired) {
		t.Fatalf("continue after the TTL: %v, want ErrExpired", err)
	}
}

// TestListVersionHoldsItsClusters: a list's version holds the checkpoint
// of each selected cluster the store has, read key by key for a selection
// (versionsOf) and by a scan for the whole fleet.
func TestListVersionHoldsItsClusters(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	fill(t, s, "c1", 0, 3, 0)
	fill(t, s, "c2", 0, 5, 0)
	all, err := s.Versions()
	if err != nil || len(all) != 2 || all["c1"] == 0 || all["c2"] == 0 {
		t.Fatalf("store versions %v %v, want c1 and c2", all, err)
	}
	cases := []struct {
		name     string
		clusters []string
		want     query.Version
	}{
		{"every cluster", nil, all},
		{"one cluster", []string{"c2"}, query.Version{"c2": all["c2"]}},
		{"a cluster the store does not hold", []string{"c2", "c9"}, query.Version{"c2": all["c2"]}},
		{"none selected", []string{}, query.Version{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Clusters: tc.clusters})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(p.Version, tc.want) {
				t.Fatalf("version %v, want %v", p.Version, tc.want)
			}
		})
	}
}

func TestListFiltersAndSearch(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	fill(t, s, "c1", 0, 100, 0)
	fill(t, s, "c2", 0, 100, 0)
	count := func(o query.ListOptions) int {
		t.Helper()
		if o.Labels == nil {
			o.Labels = labels.Everything()
		}
		o.GVR = benchdata.PodGVR
		p, err := r.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			// Only the materializer writes the store, after rawjson.Check:
			// the query API relies on Checked to skip checking again.
			if !it.Checked {
				t.Fatalf("%s: listed without Checked", it.Cluster)
			}
		}
		return len(p.Items)
	}
	fields := func(sel string) *query.FieldFilter {
		f, err := query.CompileFields(benchdata.PodGVR, sel)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	web, _ := labels.Parse("app=web")
	cases := []struct {
		name string
		o    query.ListOptions
		want int
	}{
		{"everything", query.ListOptions{}, 200},
		{"one cluster", query.ListOptions{Clusters: []string{"c2"}}, 100},
		{"no cluster selected", query.ListOptions{Clusters: []string{}}, 0},
		{"namespace", query.ListOptions{Namespace: benchdata.Namespace(3)}, 4},
		{"label index", query.ListOptions{Labels: web}, 26},
		{"field name", query.ListOptions{Fields: fields("metadata.name=" + benchdata.PodName(7))}, 2},
		{"field node", query.ListOptions{Fields: fields("spec.nodeName=node-007")}, 2},
		{"field namespace narrows", query.ListOptions{Fields: fields("metadata.namespace=" + benchdata.Namespace(1))}, 4},
		{"namespace and a contradicting field", query.ListOptions{Namespace: "a", Fields: fields("metadata.namespace=b")}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := count(tc.o); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
	// Search: substring of a name, case-insensitive, paged.
	var hits int
	o := query.SearchOptions{Text: "WEB-000000", Limit: 3}
	for {
		p, err := r.Search(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if it.GVR != benchdata.PodGVR || !it.Checked {
				t.Fatalf("hit without its resource (%v) or not Checked", it.GVR)
			}
		}
		hits += len(p.Items)
		if p.Continue == "" {
			break
		}
		o.Continue = p.Continue
	}
	if hits != 4 { // web-0000000 and web-0000008 in two clusters
		t.Fatalf("search hits %d, want 4", hits)
	}
	if p, err := r.Search(ctx, query.SearchOptions{Text: "cached-from"}); err != nil || len(p.Items) != 0 {
		t.Fatalf("the cache-source annotation key must not match everything: %d %v", len(p.Items), err)
	}
}

// TestSearchVisibility: a caller's visibility is applied before the limit,
// so every page but the last is full of visible hits, paging adds up to
// exactly the visible matches, and the cursor's position is always the
// last visible hit returned, never a hidden object.
func TestSearchVisibility(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	fill(t, s, "c1", 0, 100, 0)
	fill(t, s, "c2", 0, 100, 0)
	pods := benchdata.PodGVR.GroupResource()
	ns := func(i int) string { return benchdata.Namespace(i) }
	cases := []struct {
		name  string
		vis   *query.Visibility
		limit int64
		want  int
	}{
		{"unrestricted", nil, 70, 200},
		{"namespace-scoped", &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{pods}, Namespaces: []string{ns(3), ns(7)}}}}, 3, 8},
		{"cluster-scoped", &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c2"}}}}, 30, 100},
		// Two rules do not widen each other: team-01 only in c1, team-02 only in c2.
		{"rules kept apart", &query.Visibility{Grants: []query.Grant{
			{Clusters: []string{"c1"}, Namespaces: []string{ns(1)}}, {Clusters: []string{"c2"}, Namespaces: []string{ns(2)}}}}, 1, 4},
		{"resource excluded", &query.Visibility{Grants: []query.Grant{{Except: []schema.GroupResource{pods}}}}, 5, 0},
		{"other resource only", &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{{Group: "apps", Resource: "deployments"}}}}}, 5, 0},
		{"no grants", &query.Visibility{}, 5, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := query.SearchOptions{Text: "team-", Visible: tc.vis, Limit: tc.limit}
			seen := map[string]bool{}
			for {
				p, err := r.Search(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range p.Items {
					cl, n := rawLocationOf(t, it)
					if !tc.vis.Allows(it.GVR.GroupResource(), cl, n) {
						t.Fatalf("hidden object %s/%s in %s returned", n, it.JSON, cl)
					}
					seen[cl+"/"+n+"/"+string(it.JSON)] = true
				}
				if p.Continue == "" {
					break
				}
				if int64(len(p.Items)) != tc.limit {
					t.Fatalf("a page before the last holds %d hits, want a full page of %d", len(p.Items), tc.limit)
				}
				c, err := decodeCursor(p.Continue)
				if err != nil {
					t.Fatal(err)
				}
				last := p.Items[len(p.Items)-1]
				lc, ln := rawLocationOf(t, last)
				if want := searchKey(benchdata.PodGVR, ln, nameOf(t, last), lc); string(c.After) != string(want) {
					t.Fatalf("cursor at %q, want the last visible hit %q", c.After, want)
				}
				o.Continue = p.Continue
			}
			if len(seen) != tc.want {
				t.Fatalf("%d visible hits over all pages, want %d", len(seen), tc.want)
			}
		})
	}
}

func rawLocationOf(t *testing.T, o query.Object) (cluster, namespace string) {
	t.Helper()
	var m struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatal(err)
	}
	return o.Cluster, m.Metadata.Namespace
}

func nameOf(t *testing.T, o query.Object) string {
	t.Helper()
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatal(err)
	}
	return m.Metadata.Name
}

// TestListVisibility: a list, too, applies the caller's visibility before
// the limit, and its remaining count counts visible objects only (it must
// not reveal how many are hidden).
func TestListVisibility(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	fill(t, s, "c1", 0, 100, 0)
	fill(t, s, "c2", 0, 100, 0)
	vis := &query.Visibility{Grants: []query.Grant{{Namespaces: []string{benchdata.Namespace(3), benchdata.Namespace(7)}}, {Clusters: []string{"c2"}, Namespaces: []string{benchdata.Namespace(9)}}}}
	const visible = 2*2*2 + 2 // team-03 and team-07 in both clusters, team-09 in c2
	o := query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Visible: vis, Limit: 4}
	total := 0
	for first := true; ; first = false {
		p, err := r.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			cl, ns := rawLocationOf(t, it)
			if !vis.Allows(benchdata.PodGVR.GroupResource(), cl, ns) {
				t.Fatalf("hidden object in %s/%s returned", cl, ns)
			}
		}
		total += len(p.Items)
		if first && (p.Remaining == nil || *p.Remaining != visible-4) {
			t.Fatalf("remaining %v after the first page, want %d (visible objects only)", p.Remaining, visible-4)
		}
		if p.Continue == "" {
			break
		}
		if len(p.Items) != 4 {
			t.Fatalf("a page before the last holds %d objects", len(p.Items))
		}
		o.Continue = p.Continue
	}
	if total != visible {
		t.Fatalf("listed %d visible objects, want %d", total, visible)
	}
}

// listAll pages through the list o with r and returns its objects as
// namespace/name@cluster, in order; no page may exceed o.Limit.
func listAll(t *testing.T, r *Reader, o query.ListOptions) []string {
	t.Helper()
	var got []string
	for {
		p, err := r.List(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Limit > 0 && int64(len(p.Items)) > o.Limit {
			t.Fatalf("limit %d: page of %d", o.Limit, len(p.Items))
		}
		for _, it := range p.Items {
			var m struct {
				Metadata struct{ Namespace, Name string } `json:"metadata"`
			}
			if err := json.Unmarshal(it.JSON, &m); err != nil {
				t.Fatal(err)
			}
			got = append(got, m.Metadata.Namespace+"/"+m.Metadata.Name+"@"+it.Cluster)
		}
		if o.Continue = p.Continue; o.Continue == "" {
			return got
		}
	}
}

// TestLabelIndexPagesMatchScan: a list through the label index, whose
// objects are read in parallel batches, returns the same objects in the
// same order as a scan of the primary range with the same filter, at
// every page size, whether the index alone decides the selector or the
// labels and fields are checked again.
func TestLabelIndexPagesMatchScan(t *testing.T) {
	s, r := openReader(t)
	for _, c := range []string{"c1", "c2", "c3"} {
		fill(t, s, c, 0, 1200, 0) // 360 Pods per shard: more than one fetch batch
	}
	all := func(sel string, fsel string, limit int64) []string {
		t.Helper()
		ls, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		o := query.ListOptions{GVR: benchdata.PodGVR, Labels: ls, Limit: limit}
		if fsel != "" {
			if o.Fields, err = query.CompileFields(benchdata.PodGVR, fsel); err != nil {
				t.Fatal(err)
			}
		}
		return listAll(t, r, o)
	}
	cases := []struct {
		name, indexed, scanned, fields string
		want                           int
	}{
		// "in" with two values is not indexed: the primary range is scanned.
		{"index decides", "shard=s3", "shard in (s3,nope)", "", 360},
		{"labels checked again", "shard=s3,tier=backend", "shard in (s3,nope),tier=backend", "", 360},
		{"no match for the second requirement", "shard=s3,tier=frontend", "shard in (s3,nope),tier=frontend", "", 0},
		{"object fields checked", "shard=s3", "shard in (s3,nope)", "spec.nodeName=node-003", 18},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := all(tc.scanned, tc.fields, 0)
			if len(want) != tc.want {
				t.Fatalf("scan found %d, want %d", len(want), tc.want)
			}
			for _, limit := range []int64{0, 1, 7, 255, 256, 257, 500} {
				if got := all(tc.indexed, tc.fields, limit); !slices.Equal(got, want) {
					t.Fatalf("limit %d: index gave %d objects, scan %d (first differing order or content)", limit, len(got), len(want))
				}
			}
		})
	}
}

// TestSnapshotQuota: one client's paging expires only its own continue
// tokens (its quota), and when every snapshot is taken the client holding
// the most loses its oldest, never a client within its fair share.
func TestSnapshotQuota(t *testing.T) {
	s := openStore(t)
	fill(t, s, "c1", 0, 10, 0)
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		max, perClient int
		opens          []string // the client of each list opened, in order
		// alive: for each list opened (same order), whether its
		// continue token still works at the end.
		alive []bool
	}{
		{"per-client quota: a busy client evicts its own oldest", 100, 2,
			[]string{"quiet", "busy", "busy", "busy", "busy"},
			[]bool{true, false, false, true, true}},
		{"global cap: the client holding the most loses its oldest", 4, 0,
			[]string{"quiet", "busy", "busy", "busy", "other"},
			[]bool{true, false, true, true, true}},
		{"both: the quota acts first", 3, 2,
			[]string{"a", "b", "b", "b", "c"},
			[]bool{true, false, false, true, true}},
		{"anonymous clients share one quota", 100, 1,
			[]string{"", "", "x"},
			[]bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Reader(ReaderOptions{SnapshotTTL: time.Minute, MaxSnapshots: tc.max, MaxSnapshotsPerClient: tc.perClient})
			defer r.Close()
			now := time.Now()
			r.now = func() time.Time { return now }
			var tokens []string
			for _, c := range tc.opens {
				now = now.Add(time.Millisecond) // opened in order: older expires first
				p, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 3, Client: c})
				if err != nil || p.Continue == "" {
					t.Fatalf("first page of %s: continue %q, %v", c, p.Continue, err)
				}
				tokens = append(tokens, p.Continue)
			}
			for i, tok := range tokens {
				_, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 3, Continue: tok, Client: tc.opens[i]})
				if alive := err == nil; alive != tc.alive[i] {
					t.Errorf("list %d of %q: continue gives %v, want alive=%v", i, tc.opens[i], err, tc.alive[i])
				}
				if err != nil && !errors.Is(err, query.ErrExpired) {
					t.Errorf("list %d: %v, want ErrExpired", i, err)
				}
			}
		})
	}
}

// TestFinishedListDropsItsSnapshot: the last page of a paged list (or
// search) releases its snapshot at once, so a client that reads its lists
// to the end never fills its quota.
func TestFinishedListDropsItsSnapshot(t *testing.T) {
	s := openStore(t)
	fill(t, s, "c1", 0, 10, 0)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		page func(r *Reader, cont string) (query.Page, error)
	}{
		{"list", func(r *Reader, cont string) (query.Page, error) {
			return r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Limit: 3, Continue: cont, Client: "a"})
		}},
		{"search", func(r *Reader, cont string) (query.Page, error) {
			return r.Search(ctx, query.SearchOptions{Text: "c1", Limit: 3, Continue: cont, Client: "a"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Reader(ReaderOptions{MaxSnapshotsPerClient: 1})
			defer r.Close()
			held := func() int {
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.snaps.Len()
			}
			for range 3 { // within a quota of one, each list reads to its end
				p, err := tc.page(r, "")
				n := len(p.Items)
				for err == nil && p.Continue != "" {
					if held() != 1 {
						t.Fatalf("%d snapshots held while paging", held())
					}
					p, err = tc.page(r, p.Continue)
					n += len(p.Items)
				}
				if err != nil || n != 10 {
					t.Fatalf("paged %d objects: %v", n, err)
				}
				if held() != 0 {
					t.Fatalf("%d snapshots held after the last page", held())
				}
			}
		})
	}
}

// TestClusterIndexPagesMatchScan: a list of one cluster reads that
// cluster's index entries; every page equals what a scan of the resource
// filtered to the cluster returns (two clusters listed, one of them
// absent, take the scan), through deletes, a name reused by a new uid and
// a removed resource.
func TestClusterIndexPagesMatchScan(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	seqs := map[string]uint64{}
	for _, c := range []string{"c1", "c2", "c3"} {
		seqs[c] = fill(t, s, c, 0, 700, 0)
	}
	all := func(clusters []string, ns, fsel string, limit int64) []string {
		t.Helper()
		o := query.ListOptions{GVR: benchdata.PodGVR, Labels: labels.Everything(), Clusters: clusters, Namespace: ns, Limit: limit}
		if fsel != "" {
			var err error
			if o.Fields, err = query.CompileFields(benchdata.PodGVR, fsel); err != nil {
				t.Fatal(err)
			}
		}
		return listAll(t, r, o)
	}
	check := func(t *testing.T, want int) {
		t.Helper()
		for _, q := range []struct{ ns, fields string }{{"", ""}, {benchdata.Namespace(4), ""}, {"", "spec.nodeName=node-003"}} {
			scan := all([]string{"c2", "absent"}, q.ns, q.fields, 0)
			if q.ns == "" && q.fields == "" && len(scan) != want {
				t.Fatalf("scan found %d, want %d", len(scan), want)
			}
			for _, limit := range []int64{0, 1, 7, 256, 257} {
				if got := all([]string{"c2"}, q.ns, q.fields, limit); !slices.Equal(got, scan) {
					t.Fatalf("namespace %q fields %q limit %d: the cluster index gave %d objects, the scan %d", q.ns, q.fields, limit, len(got), len(scan))
				}
			}
		}
	}
	check(t, 700)

	// Deletes, and a name taken by a new uid: the index follows.
	var evs []feed.Event
	seq := seqs["c2"]
	for i := 0; i < 700; i += 3 {
		seq++
		evs = append(evs, ev(seq, benchdata.Delete("c2", i, 2)))
	}
	reused := benchdata.Event("c2", 1, 3)
	reused.Uid = "a-new-uid"
	seq++
	evs = append(evs, ev(seq, reused))
	if err := s.Apply(ctx, "c2", evs, seq); err != nil {
		t.Fatal(err)
	}
	t.Run("after deletes", func(t *testing.T) { check(t, 700-234) })

	seq++
	removed := &fleetviewv1.ResourceEvent{Cluster: "c2", Gvr: stream.ProtoGVR(benchdata.PodGVR), Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}
	if err := s.Apply(ctx, "c2", []feed.Event{ev(seq, removed)}, seq); err != nil {
		t.Fatal(err)
	}
	t.Run("after the resource is removed", func(t *testing.T) { check(t, 0) })
}
