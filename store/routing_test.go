package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
)

// fakeBackend holds sorted objects and pages them like the real backends
// (its cursor is the index of the next item).
type fakeBackend struct {
	objs []query.Object
	v    query.Version
	// gets records the cluster of each Get ("": unqualified).
	gets []string
}

func obj(cluster, ns, name string) query.Object {
	return query.Object{Cluster: cluster, JSON: fmt.Appendf(nil, `{"metadata":{"namespace":%q,"name":%q}}`, ns, name)}
}

func (f *fakeBackend) match(clusters []string) []query.Object {
	var out []query.Object
	for _, o := range f.objs {
		if clusters == nil || contains(clusters, o.Cluster) {
			out = append(out, o)
		}
	}
	return out
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

func (f *fakeBackend) Get(_ context.Context, o query.GetOptions) (query.Object, error) {
	f.gets = append(f.gets, o.Cluster)
	var found []string
	var first query.Object
	for _, obj := range f.objs {
		k := keyOf(obj)
		if k.ns == o.Namespace && k.name == o.Name && (o.Cluster == "" || obj.Cluster == o.Cluster) && o.Sees(obj.Cluster) {
			if found = append(found, obj.Cluster); len(found) == 1 {
				first = obj
			}
		}
	}
	switch len(found) {
	case 0:
		return query.Object{}, o.NotFound()
	case 1:
		return first, nil
	}
	return query.Object{}, o.Conflict(found)
}

func (f *fakeBackend) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	items := f.match(o.Clusters)
	start := 0
	if o.Continue != "" {
		fmt.Sscan(o.Continue, &start)
	}
	p := query.Page{Version: f.v.Clone()}
	end := len(items)
	if o.Limit > 0 && start+int(o.Limit) < end {
		end = start + int(o.Limit)
		p.Continue = fmt.Sprint(end)
	}
	p.Items = items[start:end]
	return p, nil
}

func (f *fakeBackend) Versions(context.Context) (query.Version, error) { return f.v.Clone(), nil }

func (f *fakeBackend) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	return f.List(ctx, query.ListOptions{Clusters: o.Clusters, Limit: o.Limit, Continue: o.Continue})
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func routedReader(t *testing.T) (*RoutingReader, []query.Object) {
	t.Helper()
	var all []query.Object
	badger, os := &fakeBackend{v: query.Version{"a": 5, "b": 7, "c": 9}}, &fakeBackend{v: query.Version{"a": 6, "b": 3, "c": 9}}
	for i := range 23 {
		for ci, c := range []string{"a", "b", "c"} {
			if (i+ci)%4 == 0 {
				continue // holes, so the sources interleave unevenly
			}
			o := obj(c, fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("pod-%02d", i))
			all = append(all, o)
			if c == "b" {
				os.objs = append(os.objs, o)
			} else {
				badger.objs = append(badger.objs, o)
			}
		}
	}
	solo := obj("b", "ns-9", "solo")
	all, os.objs = append(all, solo), append(os.objs, solo)
	sortObjs := func(s []query.Object) {
		sort.SliceStable(s, func(i, j int) bool { return keyOf(s[i]).less(keyOf(s[j])) })
	}
	sortObjs(all)
	sortObjs(badger.objs)
	sortObjs(os.objs)
	r := newRouter(nil, nil, backendIDs(nil), slog.Default())
	r.table.Store(&routeTable{
		routes:   []osRoute{{backend: "os", affinity: registry.ClusterAffinity{ClusterNames: []string{"b"}}, gvks: map[schema.GroupVersionKind]bool{{Version: "v1", Kind: "Pod"}: true}}},
		clusters: map[string]registry.ClusterInfo{},
		kinds:    map[schema.GroupVersionResource]string{podsGVR: "Pod"},
	})
	return &RoutingReader{router: r, backends: map[string]backendReader{defaultBackend: badger, "os": os},
		clusters: func(context.Context) ([]string, error) { return []string{"a", "b", "c"}, nil }}, all
}

func TestRoutingReaderMergesBackends(t *testing.T) {
	rr, all := routedReader(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		clusters []string
		limit    int64
	}{
		{"all clusters, one page", nil, 0},
		{"all clusters, pages of 4", nil, 4},
		{"all clusters, pages of 1", nil, 1},
		{"two clusters across backends, pages of 5", []string{"a", "b"}, 5},
		{"one cluster in opensearch", []string{"b"}, 3},
		{"one cluster in badger", []string{"c"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, o := range all {
				if tc.clusters == nil || contains(tc.clusters, o.Cluster) {
					want = append(want, o.Cluster+"/"+string(o.JSON))
				}
			}
			var got []string
			o := query.ListOptions{GVR: podsGVR, Clusters: tc.clusters, Limit: tc.limit}
			for pages := 0; ; pages++ {
				p, err := rr.List(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				if tc.limit > 0 && int64(len(p.Items)) > tc.limit {
					t.Fatalf("page of %d items over limit %d", len(p.Items), tc.limit)
				}
				for _, it := range p.Items {
					got = append(got, it.Cluster+"/"+string(it.JSON))
				}
				if p.Continue == "" {
					break
				}
				if pages > 1000 {
					t.Fatal("list does not end")
				}
				o.Continue = p.Continue
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("merged list differs:\ngot  %d items %q\nwant %d items %q", len(got), got, len(want), want)
			}
		})
	}
	v, err := rr.Versions(ctx)
	if err != nil || fmt.Sprint(v) != fmt.Sprint(query.Version{"a": 5, "b": 3, "c": 9}) {
		t.Fatalf("versions = %v %v, want the lowest per cluster", v, err)
	}
}

// TestRoutingReaderGet: a Get over two backends reads only the clusters the
// caller may see; hidden copies neither answer nor make it ambiguous, and
// a hidden object is not found with a missing one's message.
func TestRoutingReaderGet(t *testing.T) {
	only := func(clusters ...string) *query.Visibility {
		return &query.Visibility{Grants: []query.Grant{{Clusters: clusters}}}
	}
	inNamespace := func(ns string) *query.Visibility {
		return &query.Visibility{Grants: []query.Grant{{Namespaces: []string{ns}}}}
	}
	for _, tc := range []struct {
		name    string
		ns, obj string
		cluster string
		vis     *query.Visibility
		from    string   // the answering cluster, else the error
		err     string   // the exact error
		read    []string // clusters read, both backends ("": unqualified)
	}{
		{"qualified get from opensearch", "ns-1", "pod-01", "b", nil, "b", "", []string{"b"}},
		{"unqualified in three clusters over two backends", "ns-1", "pod-01", "", nil, "", `ambiguous object: pods "ns-1/pod-01" found in clusters [a, b, c]`, []string{"a", "c", "b"}},
		{"missing", "ns-1", "pod-99", "", nil, "", `pods "pod-99" not found`, []string{"a", "c", "b"}},
		{"only in b", "ns-9", "solo", "", nil, "b", "", []string{"a", "c", "b"}},
		{"the ambiguity names visible clusters only", "ns-1", "pod-01", "", only("a", "b"), "", `ambiguous object: pods "ns-1/pod-01" found in clusters [a, b]`, []string{"a", "b"}},
		{"one visible copy answers", "ns-1", "pod-01", "", only("c"), "c", "", []string{""}},
		{"one visible copy in opensearch", "ns-1", "pod-01", "", only("b", "z"), "b", "", []string{"z", "b"}},
		{"hidden reads as missing", "ns-9", "solo", "", only("a", "c"), "", `pods "solo" not found`, []string{""}},
		{"qualified hidden: not read", "ns-1", "pod-01", "b", only("a"), "", `pods "pod-01" not found`, nil},
		{"namespace hidden: not read", "ns-1", "pod-01", "", inNamespace("ns-2"), "", `pods "pod-01" not found`, nil},
		{"namespace visible everywhere", "ns-1", "pod-01", "", inNamespace("ns-1"), "", `ambiguous object: pods "ns-1/pod-01" found in clusters [a, b, c]`, []string{"a", "c", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr, _ := routedReader(t)
			o, err := rr.Get(context.Background(), query.GetOptions{GVR: podsGVR, Namespace: tc.ns, Name: tc.obj, Cluster: tc.cluster, Visible: tc.vis})
			if tc.from != "" {
				if err != nil || o.Cluster != tc.from {
					t.Fatalf("got %s %v, want the copy in %s", o.Cluster, err, tc.from)
				}
			} else if err == nil || err.Error() != tc.err {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
			var read []string
			for _, id := range []string{defaultBackend, "os"} {
				read = append(read, rr.backend(id).(*fakeBackend).gets...)
			}
			if fmt.Sprint(read) != fmt.Sprint(tc.read) {
				t.Fatalf("read clusters %q, want %q", read, tc.read)
			}
		})
	}
}

func TestSwitchToRebuilt(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	for _, tc := range []struct {
		name        string
		live, next  bool
		marker      bool
		wantContent string // content of badger/f after the switch
	}{
		{"finished rebuild replaces live", true, true, true, "new"},
		{"unfinished rebuild is left alone", true, true, false, "live"},
		{"no rebuild", true, false, false, "live"},
		{"crash after moving live away", false, true, true, "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(sub, content string) {
				if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, sub, "f"), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.live {
				write(badgerDir, "live")
			}
			if tc.next {
				write(rebuildDir, "new")
				if tc.marker {
					if err := os.WriteFile(filepath.Join(dir, rebuildDir, RebuiltMarker), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := switchToRebuilt(dir, log); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, badgerDir, "f"))
			if err != nil || string(b) != tc.wantContent {
				t.Fatalf("badger/f = %q %v, want %q", b, err, tc.wantContent)
			}
			if _, err := os.Stat(filepath.Join(dir, badgerDir, RebuiltMarker)); err == nil {
				t.Fatal("marker left in the live store")
			}
			if _, err := os.Stat(filepath.Join(dir, badgerDir+".old")); err == nil {
				t.Fatal("old store left behind")
			}
		})
	}
}

var cmsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func podsTo(backend string, clusters ...string) []osRoute {
	return []osRoute{{backend: backend, affinity: registry.ClusterAffinity{ClusterNames: clusters}, gvks: map[schema.GroupVersionKind]bool{{Version: "v1", Kind: "Pod"}: true}}}
}

func table(routes []osRoute) *routeTable {
	return &routeTable{routes: routes, clusters: map[string]registry.ClusterInfo{}, kinds: map[schema.GroupVersionResource]string{}}
}

// A route change pins the resource to the backend holding it until the
// mover moves it; during the handover both backends apply its events and
// each event is reported by one of them.
func TestRouterPinsMovedResources(t *testing.T) {
	r := newRouter(nil, nil, backendIDs(nil), slog.Default())
	r.kinds.Store(podsGVR, "Pod")
	r.kinds.Store(cmsGVR, "ConfigMap")
	prev := table(podsTo("os", "b"))
	next := table(nil) // the registry no longer sends pods of b to OpenSearch
	r.pinChanged(prev, next, []string{"a", "b"})
	pb := pairKey{"b", podsGVR, "Pod"}
	if len(next.pins) != 1 || next.pins[pb] != "os" {
		t.Fatalf("pins = %v, want only pods of b pinned to os", next.pins)
	}
	if got := next.backendFor(podsGVR, "Pod", "b"); got != "os" {
		t.Fatalf("pinned pods of b served by %q, want os", got)
	}
	if got := next.routed(podsGVR, "Pod", "b"); got != defaultBackend {
		t.Fatalf("pods of b routed to %q, want Badger", got)
	}
	if !next.accepts("os", podsGVR, "Pod", "b") || next.accepts(defaultBackend, podsGVR, "Pod", "b") {
		t.Fatal("before the move only the holder applies the pinned resource")
	}
	if !next.accepts(defaultBackend, podsGVR, "Pod", "a") || !next.accepts(defaultBackend, cmsGVR, "ConfigMap", "b") {
		t.Fatal("resources whose route did not change moved")
	}

	moving := next.with(next.pins, map[pairKey]handover{pb: {to: defaultBackend, seq: 10}})
	if !moving.accepts("os", podsGVR, "Pod", "b") || !moving.accepts(defaultBackend, podsGVR, "Pod", "b") {
		t.Fatal("during the handover both backends apply the resource")
	}
	for _, c := range []struct {
		backend string
		seq     uint64
		want    bool
	}{{"os", 10, true}, {"os", 11, false}, {defaultBackend, 10, false}, {defaultBackend, 11, true}} {
		if got := moving.reports(c.backend, podsGVR, "Pod", "b", c.seq); got != c.want {
			t.Errorf("backend %q reports seq %d: %v, want %v", c.backend, c.seq, got, c.want)
		}
	}
	if !moving.reports("os", cmsGVR, "ConfigMap", "b", 11) {
		t.Error("a resource not in transit is reported by its backend")
	}

	// Edited again before the move: towards another backend the pin stays
	// with the holder; back to the holder it goes.
	again := table(podsTo("os2", "b"))
	r.pinChanged(next, again, []string{"a", "b"})
	if again.pins[pb] != "os" || again.routed(podsGVR, "Pod", "b") != "os2" {
		t.Fatalf("pins = %v after a second edit, want pods of b still pinned to os", again.pins)
	}
	back := table(podsTo("os", "b"))
	r.pinChanged(again, back, []string{"a", "b"})
	if len(back.pins) != 0 {
		t.Fatalf("pins = %v after the edit was undone, want none", back.pins)
	}
}

// A search spans every backend; a backend a resource just left still
// holds its objects until the mover drops them, and they must not count.
func TestRoutingReaderSearchServedOnce(t *testing.T) {
	rr, all := routedReader(t)
	for _, id := range []string{defaultBackend, "os"} {
		f := rr.backends[id].(*fakeBackend)
		for i := range f.objs {
			f.objs[i].GVR = podsGVR
		}
	}
	// Badger still holds the objects of cluster b (moved to OpenSearch).
	badger := rr.backends[defaultBackend].(*fakeBackend)
	for _, o := range rr.backends["os"].(*fakeBackend).objs {
		badger.objs = append(badger.objs, o)
	}
	sort.SliceStable(badger.objs, func(i, j int) bool { return keyOf(badger.objs[i]).less(keyOf(badger.objs[j])) })
	for _, limit := range []int64{0, 1, 7} {
		var got []string
		o := query.SearchOptions{Limit: limit}
		for pages := 0; ; pages++ {
			p, err := rr.Search(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				got = append(got, it.Cluster+"/"+string(it.JSON))
			}
			if p.Continue == "" {
				break
			}
			if pages > 1000 {
				t.Fatal("search does not end")
			}
			o.Continue = p.Continue
		}
		var want []string
		for _, o := range all {
			want = append(want, o.Cluster+"/"+string(o.JSON))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("limit %d: search found %d hits, want each of the %d objects once:\ngot  %q\nwant %q", limit, len(got), len(want), got, want)
		}
	}
}

// The table a run saves decides, at the next start, where resources whose
// route changed meanwhile are held: an edit made while serve was stopped,
// or a move it did not finish, pins them there.
func TestRouterRestoresSavedRoutes(t *testing.T) {
	state := filepath.Join(t.TempDir(), routesFile)
	streams := func(context.Context) ([]string, error) { return []string{"a", "b"}, nil }
	first := newRouter(nil, nil, backendIDs(nil), slog.Default())
	first.pin, first.streams, first.state = true, streams, state
	if err := first.restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(first.table.Load().pins) != 0 {
		t.Fatal("without a saved table the routes apply as they are")
	}
	// Learned from events only: the next run must know pods all the same.
	first.kinds.Store(podsGVR, "Pod")
	if err := first.save(first.table.Load()); err != nil {
		t.Fatal(err)
	}

	// Stopped; pods of b now go to OpenSearch.
	second := newRouter(nil, nil, backendIDs(nil), slog.Default())
	second.table.Store(table(podsTo("os", "b")))
	second.pin, second.streams, second.state = true, streams, state
	if err := second.restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	pb := pairKey{"b", podsGVR, "Pod"}
	if p := second.table.Load().pins; len(p) != 1 || p[pb] != defaultBackend {
		t.Fatalf("pins = %v, want only pods of b pinned to Badger", p)
	}

	// Stopped again before the move: the pin was saved with the table.
	third := newRouter(nil, nil, backendIDs(nil), slog.Default())
	third.table.Store(table(podsTo("os", "b")))
	third.pin, third.streams, third.state = true, streams, state
	if err := third.restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := third.table.Load().pins; len(p) != 1 || p[pb] != defaultBackend {
		t.Fatalf("pins = %v after a restart mid-move, want pods of b still pinned to Badger", p)
	}
	// The move switched reads and saved that: the next run pins nothing.
	if err := third.save(third.table.Load().with(nil, nil)); err != nil {
		t.Fatal(err)
	}
	fourth := newRouter(nil, nil, backendIDs(nil), slog.Default())
	fourth.table.Store(table(podsTo("os", "b")))
	fourth.pin, fourth.streams, fourth.state = true, streams, state
	if err := fourth.restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := fourth.table.Load().pins; len(p) != 0 {
		t.Fatalf("pins = %v after the move, want none", p)
	}

	if err := os.WriteFile(state, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fourth.restore(context.Background()); !errors.Is(err, ErrRouteState) {
		t.Fatalf("restore of a corrupt table: %v, want ErrRouteState", err)
	}
}

// TestMergedPagesExpireAcrossAReadSwitch: a move's switch of reads between
// two pages of a merged list or search makes the next page 410, never a
// page that silently leaves out what the old backend had still to return.
func TestMergedPagesExpireAcrossAReadSwitch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		page func(rr *RoutingReader, cont string) (query.Page, error)
	}{
		{"list", func(rr *RoutingReader, cont string) (query.Page, error) {
			return rr.List(ctx, query.ListOptions{GVR: podsGVR, Limit: 4, Continue: cont})
		}},
		{"search", func(rr *RoutingReader, cont string) (query.Page, error) {
			return rr.Search(ctx, query.SearchOptions{Limit: 4, Continue: cont})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr, _ := routedReader(t)
			first, err := tc.page(rr, "")
			if err != nil || first.Continue == "" {
				t.Fatalf("first page: %v, continue %q", err, first.Continue)
			}
			// Without a switch the token goes on.
			if _, err := tc.page(rr, first.Continue); err != nil {
				t.Fatalf("second page without a switch: %v", err)
			}
			rr.router.switches.Add(1)
			if _, err := tc.page(rr, first.Continue); !errors.Is(err, query.ErrExpired) {
				t.Fatalf("second page after a switch: %v, want ErrExpired", err)
			}
			// A new list after the switch pages on.
			again, err := tc.page(rr, "")
			if err != nil || again.Continue == "" {
				t.Fatalf("new first page: %v", err)
			}
			if _, err := tc.page(rr, again.Continue); err != nil {
				t.Fatalf("new second page: %v", err)
			}
		})
	}
}

// TestSinglePagesExpireWhenReadsMove: a list one backend answers carries
// that backend's name in its token; after its resource's reads move to
// another backend, or come to span several, the next page is 410, never
// another backend reading a cursor it did not issue.
func TestSinglePagesExpireWhenReadsMove(t *testing.T) {
	ctx := context.Background()
	page := func(rr *RoutingReader, clusters []string, cont string) (query.Page, error) {
		return rr.List(ctx, query.ListOptions{GVR: podsGVR, Clusters: clusters, Limit: 3, Continue: cont})
	}
	unrouted := func(rr *RoutingReader) {
		rr.router.table.Store(&routeTable{clusters: map[string]registry.ClusterInfo{}, kinds: map[schema.GroupVersionResource]string{podsGVR: "Pod"}})
	}
	for _, tc := range []struct {
		name     string
		clusters []string // the list's clusters
		change   func(rr *RoutingReader)
		next     []string // the second page's clusters
	}{
		{"opensearch to badger", []string{"b"}, unrouted, []string{"b"}},
		{"badger to opensearch", []string{"a"}, func(rr *RoutingReader) {
			t := table(podsTo("os", "a"))
			t.kinds[podsGVR] = "Pod"
			rr.router.table.Store(t)
		}, []string{"a"}},
		{"one backend to several", []string{"a"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr, _ := routedReader(t)
			first, err := page(rr, tc.clusters, "")
			if err != nil || first.Continue == "" {
				t.Fatalf("first page: %v, continue %q", err, first.Continue)
			}
			second, err := page(rr, tc.clusters, first.Continue)
			if err != nil || len(second.Items) == 0 {
				t.Fatalf("second page without a move: %d items, %v", len(second.Items), err)
			}
			if tc.change != nil {
				tc.change(rr)
			}
			if _, err := page(rr, tc.next, first.Continue); !errors.Is(err, query.ErrExpired) {
				t.Fatalf("second page after the move: %v, want ErrExpired", err)
			}
		})
	}
	rr, _ := routedReader(t)
	if _, err := page(rr, []string{"a"}, "12"); !errors.Is(err, query.ErrInvalid) {
		t.Fatalf("a token no backend set issued: %v, want ErrInvalid", err)
	}
}
