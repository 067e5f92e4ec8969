package opensearch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

var podGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

type fakeDoc struct{ ns, name, cluster, app, node string }

func (d fakeDoc) object() string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"labels":{"app":%q}},"spec":{"nodeName":%q}}`, d.name, d.ns, d.app, d.node)
}

// fakeSearch stands in for OpenSearch's sorted search: it honours size,
// search_after, the namespace and cluster filters and points in time, and
// ignores label clauses, which List re-checks on every hit anyway.
type fakeSearch struct {
	docs []fakeDoc // in sort order

	mu       sync.Mutex
	opened   int
	closed   []string // points in time DELETEd, in order
	searched []string // the point in time of each search ("": none)
	// fault, when set, may answer a request in place of the fake (a data
	// node lost): it sees the method, path and point in time of each.
	fault func(method, path, pit string) (status int, body string, ok bool)
}

func newFakeSearch(t *testing.T) (*fakeSearch, *Store) { return newFakeSearchWith(t, Options{}) }

// newFakeSearchWith opens a store with o (its address and credentials
// set) on a new fake.
func newFakeSearchWith(t *testing.T, o Options) (*fakeSearch, *Store) {
	f := &fakeSearch{}
	for i := range 25 {
		for _, c := range []string{"c1", "c2"} {
			f.docs = append(f.docs, fakeDoc{ns: fmt.Sprintf("ns-%d", i%3), name: fmt.Sprintf("pod-%02d", i), cluster: c,
				app: []string{"web", "db"}[i%2], node: fmt.Sprintf("node-%d", i%4)})
		}
	}
	slices.SortFunc(f.docs, func(a, b fakeDoc) int {
		return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name), cmp.Compare(a.cluster, b.cluster))
	})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	o.Addresses, o.Username, o.Password = []string{srv.URL}, "u", "p"
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return f, s
}

func (f *fakeSearch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body struct {
		Size        int      `json:"size"`
		SearchAfter []string `json:"search_after"`
		PIT         struct {
			ID string `json:"id"`
		} `json:"pit"`
		PITID []string `json:"pit_id"`
		Query struct {
			Bool struct {
				Filter []map[string]map[string]any `json:"filter"`
			} `json:"bool"`
		} `json:"query"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if f.fault != nil {
		if status, b, ok := f.fault(r.Method, r.URL.Path, body.PIT.ID); ok {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(b))
			return
		}
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/fleetview-checkpoints/"):
		_, _ = w.Write([]byte(`{"hits":{"hits":[{"_source":{"cluster":"c1","seq":7}},{"_source":{"cluster":"c2","seq":9}}]}}`))
	case strings.HasSuffix(r.URL.Path, "/_search/point_in_time") && r.Method == http.MethodPost:
		f.opened++
		fmt.Fprintf(w, `{"pit_id":"pit-%d"}`, f.opened)
	case r.URL.Path == "/_search/point_in_time":
		f.closed = append(f.closed, body.PITID...)
	case body.PIT.ID != "" && slices.Contains(f.closed, body.PIT.ID):
		f.searched = append(f.searched, body.PIT.ID)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"type":"search_context_missing_exception"}}`))
	default:
		f.searched = append(f.searched, body.PIT.ID)
		f.search(w, body.Size, body.SearchAfter, body.Query.Bool.Filter)
	}
}

func (f *fakeSearch) search(w http.ResponseWriter, size int, after []string, filter []map[string]map[string]any) {
	var out []map[string]any
	for _, d := range f.docs {
		if after != nil && cmp.Or(cmp.Compare(d.ns, after[0]), cmp.Compare(d.name, after[1]), cmp.Compare(d.cluster, after[2])) <= 0 {
			continue
		}
		if !fakeFiltered(d, filter) || len(out) == size {
			continue
		}
		fv := map[string]any{"cluster": d.cluster, "version": "v1", "resource": "pods", "labels": []string{"app=" + d.app}, "object": d.object()}
		out = append(out, map[string]any{"sort": []string{d.ns, d.name, d.cluster, "uid"},
			"_source": map[string]any{"metadata": map[string]any{"name": d.name, "namespace": d.ns}, "fleetview": fv}})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"hits": map[string]any{"hits": out}})
}

func fakeFiltered(d fakeDoc, filter []map[string]map[string]any) bool {
	for _, c := range filter {
		if should, ok := c["bool"]["should"].([]any); ok && !fakeAny(d, should) {
			return false
		}
		if ns, ok := c["term"]["metadata.namespace.keyword"]; ok && ns != d.ns {
			return false
		}
		if name, ok := c["term"]["metadata.name.keyword"]; ok && name != d.name {
			return false
		}
		if cl, ok := c["term"]["fleetview.cluster"]; ok && cl != d.cluster {
			return false
		}
		if cs, ok := c["terms"]["fleetview.cluster"].([]any); ok && !slices.Contains(cs, any(d.cluster)) {
			return false
		}
	}
	return true
}

// TestListPages pages through lists on a fake OpenSearch: the pages add up
// to the matching objects in order, every page carries the first page's
// version, and the point in time of a paged list is closed after its last
// page only.
func TestListPages(t *testing.T) {
	web, _ := labels.Parse("app=web")
	node, err := query.CompileFields(podGVR, "spec.nodeName=node-1")
	if err != nil {
		t.Fatal(err)
	}
	nsField, err := query.CompileFields(podGVR, "metadata.namespace=ns-2")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		o       query.ListOptions
		want    func(fakeDoc) bool
		version string
	}{
		{"everything", query.ListOptions{}, func(fakeDoc) bool { return true }, "map[c1:7 c2:9]"},
		{"pages of 7", query.ListOptions{Limit: 7}, func(fakeDoc) bool { return true }, "map[c1:7 c2:9]"},
		{"exactly one page", query.ListOptions{Limit: 50}, func(fakeDoc) bool { return true }, "map[c1:7 c2:9]"},
		{"one cluster", query.ListOptions{Clusters: []string{"c2"}, Limit: 4}, func(d fakeDoc) bool { return d.cluster == "c2" }, "map[c2:9]"},
		{"no cluster", query.ListOptions{Clusters: []string{}}, func(fakeDoc) bool { return false }, "map[]"},
		{"namespace", query.ListOptions{Namespace: "ns-1", Limit: 5}, func(d fakeDoc) bool { return d.ns == "ns-1" }, "map[c1:7 c2:9]"},
		{"labels", query.ListOptions{Labels: web, Limit: 6}, func(d fakeDoc) bool { return d.app == "web" }, "map[c1:7 c2:9]"},
		{"field on the object", query.ListOptions{Fields: node, Limit: 3}, func(d fakeDoc) bool { return d.node == "node-1" }, "map[c1:7 c2:9]"},
		{"field namespace", query.ListOptions{Fields: nsField, Limit: 9}, func(d fakeDoc) bool { return d.ns == "ns-2" }, "map[c1:7 c2:9]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, s := newFakeSearch(t)
			var want, got []string
			for _, d := range f.docs {
				if tc.want(d) {
					want = append(want, d.object())
				}
			}
			o := tc.o
			o.GVR = podGVR
			pages := 0
			for {
				p, err := s.List(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				if v := fmt.Sprint(p.Version); v != tc.version {
					t.Fatalf("page %d version %s, want %s", pages, v, tc.version)
				}
				for _, it := range p.Items {
					got = append(got, string(it.JSON))
				}
				if o.Limit > 0 && len(p.Items) > int(o.Limit) {
					t.Fatalf("page of %d items, limit %d", len(p.Items), o.Limit)
				}
				if o.Continue = p.Continue; o.Continue == "" {
					break
				}
				if len(f.closed) != 0 {
					t.Fatalf("point in time closed before the last page: %v", f.closed)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got %d objects, want %d:\n%v\n%v", len(got), len(want), got, want)
			}
			// A paged list reads one point in time, closed after its last page.
			if pits := min(tc.o.Limit, 1); f.opened != int(pits) || len(f.closed) != int(pits) {
				t.Fatalf("points in time opened %d, closed %v, want %d", f.opened, f.closed, pits)
			}
		})
	}
}

// fakeAny evaluates a visibility clause: some grant's cluster and
// namespace terms hold (every fake document is a Pod).
func fakeAny(d fakeDoc, should []any) bool {
	for _, g := range should {
		b, _ := json.Marshal(g.(map[string]any)["bool"].(map[string]any)["filter"])
		var filter []map[string]map[string]any
		_ = json.Unmarshal(b, &filter)
		ok := true
		for _, c := range filter {
			if ns, found := c["terms"]["metadata.namespace.keyword"].([]any); found && !slices.Contains(ns, any(d.ns)) {
				ok = false
			}
			if cs, found := c["terms"]["fleetview.cluster"].([]any); found && !slices.Contains(cs, any(d.cluster)) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestSearchVisibility: the caller's visibility is part of the query, so
// a page counts visible documents only and its cursor is the last visible
// one.
func TestSearchVisibility(t *testing.T) {
	_, s := newFakeSearch(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		vis   *query.Visibility
		limit int64
		want  int
	}{
		{"namespace-scoped", &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"ns-1"}}}}, 3, 16},
		{"cluster-scoped", &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c2"}}}}, 4, 25},
		{"rules kept apart", &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c1"}, Namespaces: []string{"ns-0"}}, {Clusters: []string{"c2"}, Namespaces: []string{"ns-2"}}}}, 5, 17},
		{"no grants", &query.Visibility{}, 3, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := query.SearchOptions{Text: "pod", Visible: tc.vis, Limit: tc.limit}
			total := 0
			for {
				p, err := s.Search(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range p.Items {
					var m struct {
						Metadata struct{ Namespace string } `json:"metadata"`
					}
					_ = json.Unmarshal(it.JSON, &m)
					if !tc.vis.Allows(schema.GroupResource{Resource: "pods"}, it.Cluster, m.Metadata.Namespace) {
						t.Fatalf("hidden document %s in %s returned", it.JSON, it.Cluster)
					}
				}
				total += len(p.Items)
				if p.Continue == "" {
					break
				}
				if int64(len(p.Items)) != tc.limit {
					t.Fatalf("a page before the last holds %d hits, want %d", len(p.Items), tc.limit)
				}
				o.Continue = p.Continue
			}
			if total != tc.want {
				t.Fatalf("%d visible hits over all pages, want %d", total, tc.want)
			}
		})
	}
}

// TestListVisibility: a list carries the caller's visibility in its query.
func TestListVisibility(t *testing.T) {
	_, s := newFakeSearch(t)
	vis := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c1"}, Namespaces: []string{"ns-2"}}}}
	o := query.ListOptions{GVR: podGVR, Labels: labels.Everything(), Visible: vis, Limit: 3}
	total := 0
	for {
		p, err := s.List(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if it.Cluster != "c1" || !strings.Contains(string(it.JSON), `"namespace":"ns-2"`) {
				t.Fatalf("hidden object %s in %s", it.JSON, it.Cluster)
			}
		}
		total += len(p.Items)
		if p.Continue == "" {
			break
		}
		if len(p.Items) != 3 {
			t.Fatalf("a page before the last holds %d objects", len(p.Items))
		}
		o.Continue = p.Continue
	}
	if total != 8 {
		t.Fatalf("listed %d, want 8", total)
	}
	if p, err := s.List(context.Background(), query.ListOptions{GVR: podGVR, Visible: &query.Visibility{}}); err != nil || len(p.Items) != 0 {
		t.Fatalf("no grants: %d items, %v", len(p.Items), err)
	}
}

// TestGetVisibility: a Get asks only for the clusters the caller may see
// (none: it asks nothing), and a hidden object reads like a missing one.
func TestGetVisibility(t *testing.T) {
	f, s := newFakeSearch(t)
	only := func(clusters ...string) *query.Visibility {
		return &query.Visibility{Grants: []query.Grant{{Clusters: clusters}}}
	}
	missing := `pods "pod-00" not found`
	for _, tc := range []struct {
		name     string
		cluster  string
		vis      *query.Visibility
		from     string // the cluster answering, else the error
		err      string
		searches int
	}{
		{"everything visible: ambiguous", "", nil, "", `ambiguous object: pods "ns-0/pod-00" found in clusters [c1, c2]`, 1},
		{"one visible copy", "", only("c2", "c3"), "c2", "", 1},
		{"no visible copy", "", only("c3"), "", missing, 1},
		{"qualified, hidden cluster: not asked", "c1", only("c2"), "", missing, 0},
		{"qualified, visible", "c1", only("c1"), "c1", "", 1},
		{"namespace hidden: not asked", "", &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"ns-1"}}}}, "", missing, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.mu.Lock()
			before := len(f.searched)
			f.mu.Unlock()
			o, err := s.Get(context.Background(), query.GetOptions{GVR: podGVR, Namespace: "ns-0", Name: "pod-00", Cluster: tc.cluster, Visible: tc.vis})
			f.mu.Lock()
			searches := len(f.searched) - before
			f.mu.Unlock()
			if searches != tc.searches {
				t.Fatalf("%d searches, want %d", searches, tc.searches)
			}
			if tc.from != "" {
				if err != nil || o.Cluster != tc.from {
					t.Fatalf("got %s %v, want the copy in %s", o.Cluster, err, tc.from)
				}
				return
			}
			if err == nil || err.Error() != tc.err {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := s.Get(context.Background(), query.GetOptions{GVR: podGVR, Namespace: "ns-0", Name: "nope"}); err == nil || err.Error() != `pods "nope" not found` || !errors.Is(err, query.ErrNotFound) {
		t.Fatalf("missing object: %v", err)
	}
}

// TestPITQuota: each step starts a paged list or search for a client; the
// quota closes (DELETEs) the oldest point in time of the client past its
// own quota, or of the client holding the most when all are taken, and
// the evicted read's continue token is then ErrExpired (OpenSearch no
// longer has its point in time); every other read pages on.
func TestPITQuota(t *testing.T) {
	type step struct {
		client string
		search bool
	}
	l := func(c string) step { return step{client: c} }
	cases := []struct {
		name           string
		max, perClient int
		steps          []step
		closed         []string // points in time DELETEd by the quota
	}{
		{"within the quotas", 4, 2, []step{l("a"), l("b"), l("a"), l("b")}, nil},
		{"per client: its own oldest", 10, 2, []step{l("a"), l("a"), l("b"), l("a"), l("b")}, []string{"pit-1"}},
		{"per client: twice", 10, 1, []step{l("a"), l("b"), l("a"), l("a")}, []string{"pit-1", "pit-3"}},
		{"global: the client holding the most", 3, 0, []step{l("a"), l("b"), l("b"), l("c")}, []string{"pit-2"}},
		{"global: equal holders lose the oldest", 2, 0, []step{l("a"), l("b"), l("c")}, []string{"pit-1"}},
		{"searches count too", 10, 1, []step{l("a"), {client: "a", search: true}, {client: "a", search: true}}, []string{"pit-1", "pit-2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, s := newFakeSearchWith(t, Options{MaxSnapshots: tc.max, MaxSnapshotsPerClient: tc.perClient})
			ctx := context.Background()
			first := func(st step, cont string) (query.Page, error) {
				if st.search {
					return s.Search(ctx, query.SearchOptions{Text: "pod", Limit: 5, Continue: cont, Client: st.client})
				}
				return s.List(ctx, query.ListOptions{GVR: podGVR, Limit: 5, Continue: cont, Client: st.client})
			}
			tokens := make([]string, len(tc.steps))
			for i, st := range tc.steps {
				p, err := first(st, "")
				if err != nil || p.Continue == "" {
					t.Fatalf("step %d: first page: continue %q, err %v", i, p.Continue, err)
				}
				tokens[i] = p.Continue
			}
			if !slices.Equal(f.closed, tc.closed) {
				t.Fatalf("points in time closed %v, want %v", f.closed, tc.closed)
			}
			searches := len(f.searched)
			for i, st := range tc.steps {
				pit := fmt.Sprintf("pit-%d", i+1)
				_, err := first(st, tokens[i])
				if evicted := slices.Contains(tc.closed, pit); evicted != errors.Is(err, query.ErrExpired) {
					t.Fatalf("step %d (%s): next page err %v, evicted %v", i, pit, err, evicted)
				} else if !evicted && err != nil {
					t.Fatalf("step %d: next page: %v", i, err)
				}
			}
			s.pitMu.Lock()
			held := s.pits.Len()
			s.pitMu.Unlock()
			if want := len(tc.steps) - len(tc.closed); held != want || len(f.searched)-searches != len(tc.steps) {
				t.Fatalf("%d points in time held, want %d; %d next pages searched", held, want, len(f.searched)-searches)
			}
		})
	}
}

// TestFinishedReadClosesItsPIT: the last page of a paged list or search
// closes its point in time at once and gives back its room in the quota,
// so a client reading its lists to the end is never evicted.
func TestFinishedReadClosesItsPIT(t *testing.T) {
	cases := []struct {
		name string
		page func(s *Store, cont string) (query.Page, error)
	}{
		{"list", func(s *Store, cont string) (query.Page, error) {
			return s.List(context.Background(), query.ListOptions{GVR: podGVR, Limit: 20, Continue: cont, Client: "a"})
		}},
		{"search", func(s *Store, cont string) (query.Page, error) {
			return s.Search(context.Background(), query.SearchOptions{Text: "pod", Limit: 20, Continue: cont, Client: "a"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, s := newFakeSearchWith(t, Options{MaxSnapshotsPerClient: 1})
			for i := 1; i <= 3; i++ { // within a quota of one, each read pages to its end
				pit := fmt.Sprintf("pit-%d", i)
				cont, pages := "", 0
				for {
					p, err := tc.page(s, cont)
					if err != nil {
						t.Fatalf("read %d page %d: %v", i, pages, err)
					}
					pages++
					if cont = p.Continue; cont == "" {
						break
					}
					if slices.Contains(f.closed, pit) {
						t.Fatalf("read %d: %s closed before its last page", i, pit)
					}
				}
				if pages != 3 {
					t.Fatalf("read %d: %d pages of 20 over 50 objects", i, pages)
				}
				if want := []string{"pit-1", "pit-2", "pit-3"}[:i]; !slices.Equal(f.closed, want) {
					t.Fatalf("after read %d: closed %v, want %v", i, f.closed, want)
				}
				s.pitMu.Lock()
				held := s.pits.Len()
				s.pitMu.Unlock()
				if held != 0 {
					t.Fatalf("after read %d: %d points in time held", i, held)
				}
			}
		})
	}
}

// TestClosedStoreClosesItsPITs: Close DELETEs the points in time continue
// tokens name, and those tokens are then ErrExpired.
func TestClosedStoreClosesItsPITs(t *testing.T) {
	f, s := newFakeSearch(t)
	ctx := context.Background()
	var tokens []string
	for _, c := range []string{"a", "b"} {
		p, err := s.List(ctx, query.ListOptions{GVR: podGVR, Limit: 5, Client: c})
		if err != nil || p.Continue == "" {
			t.Fatalf("first page: %q %v", p.Continue, err)
		}
		tokens = append(tokens, p.Continue)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(f.closed)); !slices.Equal(got, []string{"pit-1", "pit-2"}) {
		t.Fatalf("closed %v, want both points in time", got)
	}
	for _, tok := range tokens {
		if _, err := s.List(ctx, query.ListOptions{GVR: podGVR, Limit: 5, Continue: tok}); !errors.Is(err, query.ErrExpired) {
			t.Fatalf("token after Close: %v, want ErrExpired", err)
		}
	}
}

func TestOptionsValidateSnapshots(t *testing.T) {
	cases := []struct {
		name           string
		max, perClient int
		want           string
	}{
		{"defaults", 0, 0, ""},
		{"per client within", 8, 2, ""},
		{"negative", -1, 0, "must not be negative"},
		{"per client above the total", 4, 5, "exceed the total"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Addresses: []string{"http://127.0.0.1:9200"}, MaxSnapshots: tc.max, MaxSnapshotsPerClient: tc.perClient}
			err := errors.Join(o.Validate()...)
			if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(fmt.Sprint(err), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPITFromAnotherReplica: a point in time outlives the store that
// opened it (another replica on the same OpenSearch, or before a restart),
// so a store that does not hold it still reads it, holds it under the
// client's quota, and closes it on the last page.
func TestPITFromAnotherReplica(t *testing.T) {
	f, s1 := newFakeSearch(t)
	s2, err := Open(Options{Addresses: s1.opts.Addresses, Username: "u", Password: "p", MaxSnapshotsPerClient: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	ctx := context.Background()
	o := query.ListOptions{GVR: podGVR, Limit: 20, Client: "a"}
	p, err := s1.List(ctx, o)
	if err != nil || p.Continue == "" {
		t.Fatalf("first page: %q %v", p.Continue, err)
	}
	o.Continue = p.Continue
	if p, err = s2.List(ctx, o); err != nil || p.Continue == "" {
		t.Fatalf("second page on another store: %q %v", p.Continue, err)
	}
	if _, held := s2.pits.Get("pit-1", s2.now()); !held {
		t.Fatal("the adopted point in time is not held under the quota")
	}
	o.Continue = p.Continue
	if p, err = s2.List(ctx, o); err != nil || p.Continue != "" {
		t.Fatalf("last page: %q %v", p.Continue, err)
	}
	if !slices.Equal(f.closed, []string{"pit-1"}) || s2.pits.Len() != 0 {
		t.Fatalf("closed %v, %d held, want pit-1 closed by the last page", f.closed, s2.pits.Len())
	}
}
