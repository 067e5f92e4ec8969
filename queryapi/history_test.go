package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
	"github.com/fleetview/fleetview/queryapi/rest"
)

// fakeHistory records what a history read asked the backend and answers
// the revisions it is given (visibility ignored, as a broken backend
// would).
type fakeHistory struct {
	changes query.ChangesOptions
	revs    query.RevisionsOptions
	answer  []query.Revision
	err     error
}

func (f *fakeHistory) Changes(_ context.Context, o query.ChangesOptions) (query.ChangePage, error) {
	f.changes = o
	return query.ChangePage{Changes: slices.Clone(f.answer), Continue: "cursor"}, f.err
}

func (f *fakeHistory) Revisions(_ context.Context, o query.RevisionsOptions) (query.RevisionPage, error) {
	f.revs = o
	return query.RevisionPage{Revisions: slices.Clone(f.answer), Continue: "cursor"}, f.err
}

func historyService(h HistoryReader) *queryService {
	s := query.NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	return &queryService{history: h, reader: &fakeReader{}, sealer: s, versions: newVersionBook(nil, s, 0, 0)}
}

// TestChangesBadInput: each malformed parameter is INVALID_ARGUMENT naming
// the field, and reaches no backend.
func TestChangesBadInput(t *testing.T) {
	cases := []struct {
		name  string
		req   *fleetviewv1.ListChangesRequest
		field string
	}{
		{"bad since", &fleetviewv1.ListChangesRequest{Since: "yesterday"}, "since"},
		{"bad until", &fleetviewv1.ListChangesRequest{Until: "2026-13-01T00:00:00Z"}, "until"},
		{"since after until", &fleetviewv1.ListChangesRequest{Since: "2026-12-06T10:00:00Z", Until: "2026-12-06T09:00:00Z"}, "since"},
		{"unknown type", &fleetviewv1.ListChangesRequest{Types: []string{"ADDED,RENAMED"}}, "types"},
		{"bad resource", &fleetviewv1.ListChangesRequest{Resources: []string{"apps/v1/deployments"}}, "resources"},
		{"bad label selector", &fleetviewv1.ListChangesRequest{LabelSelector: "a in (b"}, "labelSelector"},
		{"negative limit", &fleetviewv1.ListChangesRequest{Limit: -1}, "limit"},
		{"bad cluster", &fleetviewv1.ListChangesRequest{Clusters: []string{"a,B_ad"}}, "clusters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fh := &fakeHistory{}
			_, err := historyService(fh).ListChanges(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Fatalf("got %v, want INVALID_ARGUMENT naming %s", err, tc.field)
			}
			if fh.changes.Limit != 0 {
				t.Fatal("a refused request reached the backend")
			}
		})
	}
}

// TestChangesOptions: the parameters reach the backend parsed (comma
// lists split, resource[.group], types), with the caller's visibility; the
// continue token is bound to the filters and the visibility.
func TestChangesOptions(t *testing.T) {
	fh := &fakeHistory{}
	q := historyService(fh)
	shop := &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"shop"}}}}
	ctx := authz.WithVisibility(context.Background(), shop)
	req := &fleetviewv1.ListChangesRequest{Since: "2026-12-06T10:00:00Z", Until: "2026-12-06T11:00:00.5Z", Clusters: []string{"m1,m2", "m3"},
		Resources: []string{"pods,deployments.apps"}, Types: []string{"modified", "DELETED"}, LabelSelector: "app=web", Objects: true, Limit: 7}
	resp, err := q.ListChanges(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	o := fh.changes
	if !o.Since.Equal(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)) || !o.Until.Equal(time.Date(2026, 12, 6, 11, 0, 0, 5e8, time.UTC)) {
		t.Errorf("since %v until %v", o.Since, o.Until)
	}
	if !slices.Equal(o.Clusters, []string{"m1", "m2", "m3"}) {
		t.Errorf("clusters %v", o.Clusters)
	}
	if want := []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}}; !slices.Equal(o.Resources, want) {
		t.Errorf("resources %v, want %v", o.Resources, want)
	}
	if !slices.Equal(o.Types, []query.ChangeType{query.ChangeModified, query.ChangeDeleted}) {
		t.Errorf("types %v", o.Types)
	}
	if o.Labels.String() != "app=web" || !o.Objects || o.Limit != 7 || o.Visible != shop {
		t.Errorf("labels %v objects %v limit %d visible %v", o.Labels, o.Objects, o.Limit, o.Visible)
	}
	next := &fleetviewv1.ListChangesRequest{Since: req.Since, Until: req.Until, Clusters: req.Clusters, Resources: req.Resources,
		Types: req.Types, LabelSelector: req.LabelSelector, Objects: true, Limit: 7, Continue: resp.GetContinue()}
	if _, err := q.ListChanges(ctx, next); err != nil || fh.changes.Continue != "cursor" {
		t.Fatalf("same caller continues: %v (cursor %q)", err, fh.changes.Continue)
	}
	other := authz.WithVisibility(context.Background(), &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"payments"}}}})
	if _, err := q.ListChanges(other, next); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another scope continues the token: %v", err)
	}
	next.LabelSelector = "app=db"
	if _, err := q.ListChanges(ctx, next); status.Code(err) != codes.InvalidArgument {
		t.Errorf("other filters continue the token: %v", err)
	}
}

// TestHistoryEntriesNarrowed: what the caller may not see never leaves
// the service, even from a backend that ignored the visibility, and a
// malformed stored object is left out; objects and patches travel as
// their JSON.
func TestHistoryEntriesNarrowed(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	rev := func(ns, name string, obj string) query.Revision {
		return query.Revision{Change: query.Change{Cluster: "m1", GVR: pods, Namespace: ns, Name: name, Seq: 3, Type: query.ChangeModified,
			Time: time.Unix(1, 0)}, Object: []byte(obj), Patch: []byte(`{"metadata":{"labels":{"a":"b"}}}`)}
	}
	fh := &fakeHistory{answer: []query.Revision{
		rev("shop", "web", `{"kind":"Pod","metadata":{"name":"web"}}`),
		rev("payments", "db", `{"kind":"Pod"}`),
		rev("shop", "bad", `{"kind":`),
	}}
	ctx := authz.WithVisibility(context.Background(), &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"shop"}}}})
	resp, err := historyService(fh).ListChanges(ctx, &fleetviewv1.ListChangesRequest{Objects: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetChanges()) != 1 {
		t.Fatalf("%d changes, want the visible valid one: %v", len(resp.GetChanges()), resp.GetChanges())
	}
	e := resp.GetChanges()[0]
	if e.GetName() != "web" || e.GetKind() != "Pod" || e.GetType() != "MODIFIED" || string(e.GetRawPatch()) != `{"metadata":{"labels":{"a":"b"}}}` {
		t.Errorf("entry %v", e)
	}
	rr, err := historyService(fh).ListRevisions(ctx, &fleetviewv1.ListRevisionsRequest{Group: "core", Version: "v1", Resource: "pods", Name: "web", Namespace: "shop", Structured: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.GetRevisions()) != 1 || rr.GetRevisions()[0].GetObject().GetFields()["kind"].GetStringValue() != "Pod" || rr.GetRevisions()[0].GetPatch() == nil {
		t.Errorf("structured revisions %v", rr.GetRevisions())
	}
}

// TestHistoryOutsideWindow: a read before the window is 410 Gone, a
// history read without history 501, an asOf in the future 400.
func TestHistoryOutsideWindow(t *testing.T) {
	fh := &fakeHistory{err: fmtErr(query.ErrOutsideWindow)}
	_, err := historyService(fh).ListRevisions(context.Background(), &fleetviewv1.ListRevisionsRequest{Version: "v1", Resource: "pods", Name: "x"})
	if m := apierr.OfStatus(status.Convert(err)); m.HTTP != 410 || m.Reason != "Gone" {
		t.Errorf("outside the window: %v -> %d %s", err, m.HTTP, m.Reason)
	}
	if _, err := historyService(nil).ListChanges(context.Background(), &fleetviewv1.ListChangesRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("no history: %v", err)
	}
	q := historyService(fh)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if _, err := q.Get(context.Background(), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Name: "x", AsOf: future}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "asOf") {
		t.Errorf("get as of the future: %v", err)
	}
	if _, err := q.List(context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", AsOf: "noon"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "asOf") {
		t.Errorf("list as of a bad time: %v", err)
	}
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	if _, err := q.List(context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", AsOf: past.Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	if got := q.reader.(*fakeReader).got.AsOf; !got.Equal(past) {
		t.Errorf("list asOf reached the backend as %v, want %v", got, past)
	}
}

func fmtErr(err error) error { return errors.Join(errors.New("revisions of pods/x"), err) }

// TestGuardChanges: the change feed is admitted like a search with list
// as the verb: a user's visibility per resource and cluster, Secrets never
// under "*", clusters narrowed (comma lists too), no list rule refused;
// revisions are admitted as a Get of the object.
func TestGuardChanges(t *testing.T) {
	g := testGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: fleetviewv1.QueryService_ListChanges_FullMethodName}
	cases := []struct {
		name, tok string
		req       *fleetviewv1.ListChangesRequest
		code      codes.Code
		clusters  []string
		visible   map[[3]string]bool
	}{
		{name: "admin", tok: "admin-tok", req: &fleetviewv1.ListChangesRequest{}},
		{name: "cluster-scoped user", tok: "alice-tok", req: &fleetviewv1.ListChangesRequest{}, clusters: []string{"member1"},
			visible: map[[3]string]bool{{"pods", "member1", "shop"}: true, {"pods", "member2", "shop"}: false, {"secrets", "member1", "shop"}: false}},
		{name: "comma list narrowed", tok: "alice-tok", req: &fleetviewv1.ListChangesRequest{Clusters: []string{"member1,member2"}}, clusters: []string{"member1"}},
		{name: "another cluster", tok: "alice-tok", req: &fleetviewv1.ListChangesRequest{Clusters: []string{"member2"}}, code: codes.PermissionDenied},
		{name: "namespace-scoped user", tok: "bob-tok", req: &fleetviewv1.ListChangesRequest{},
			visible: map[[3]string]bool{{"pods", "m", "shop"}: true, {"pods", "m", "payments"}: false, {"configmaps", "m", "shop"}: false}},
		{name: "no list rule", tok: "ops-tok", req: &fleetviewv1.ListChangesRequest{}, code: codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var vis *query.Visibility
			reached := false
			h := func(ctx context.Context, _ any) (any, error) {
				reached, vis = true, authz.VisibleFrom(ctx)
				return &fleetviewv1.ListChangesResponse{Changes: []*fleetviewv1.HistoryEntry{
					{Cluster: "member1", Version: "v1", Resource: "pods", Namespace: "shop"},
					{Cluster: "member2", Version: "v1", Resource: "pods", Namespace: "payments"},
					{Cluster: "member1", Version: "v1", Resource: "secrets", Namespace: "shop"},
				}}, nil
			}
			resp, err := g.Unary(withToken(tc.tok), tc.req, info, h)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if reached {
					t.Fatal("a refused request reached the service")
				}
				return
			}
			if !slices.Equal(tc.req.GetClusters(), tc.clusters) {
				t.Errorf("clusters %v, want %v", tc.req.GetClusters(), tc.clusters)
			}
			for loc, want := range tc.visible {
				if got := vis.Allows(schema.ParseGroupResource(loc[0]), loc[1], loc[2]); got != want {
					t.Errorf("%v visible=%v, want %v", loc, got, want)
				}
			}
			for _, e := range resp.(*fleetviewv1.ListChangesResponse).GetChanges() {
				if !vis.Allows(schema.GroupResource{Resource: e.GetResource()}, e.GetCluster(), e.GetNamespace()) {
					t.Errorf("entry %v left the Guard outside the caller's visibility", e)
				}
			}
		})
	}
	rinfo := &grpc.UnaryServerInfo{FullMethod: fleetviewv1.QueryService_ListRevisions_FullMethodName}
	h := func(ctx context.Context, _ any) (any, error) { return &fleetviewv1.ListRevisionsResponse{}, nil }
	for tok, want := range map[string]codes.Code{"alice-tok": codes.OK, "bob-tok": codes.PermissionDenied, "admin-tok": codes.OK} {
		_, err := g.Unary(withToken(tok), &fleetviewv1.ListRevisionsRequest{Version: "v1", Resource: "pods", Name: "web", Cluster: "member1", Namespace: "shop"}, rinfo, h)
		if status.Code(err) != want {
			t.Errorf("%s revisions: %v, want %v", tok, err, want)
		}
	}
}

// BenchmarkHistoryRevisionsAPI is the API's share of one object's 101
// revisions (realistic 3 KB Pods, merge patches): the service's checks
// and conversion, the store's share and the REST writer apart
// (docs/benchmarks/history.md).
func BenchmarkHistoryRevisionsAPI(b *testing.B) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	revs := make([]query.Revision, 101)
	for i := range revs {
		revs[i] = query.Revision{Change: query.Change{Cluster: "m1", GVR: pods, Namespace: "ns", Name: "web", Seq: uint64(i + 1),
			Type: query.ChangeModified, Time: time.Unix(int64(i), 0), Labels: map[string]string{"app": "web", "rev": "x"}},
			Object: podjson.Pod("m1", 7, i+1), Patch: []byte(`{"metadata":{"labels":{"rev":"x"},"resourceVersion":"12"}}`)}
	}
	q := historyService(&fakeHistory{answer: revs})
	req := &fleetviewv1.ListRevisionsRequest{Version: "v1", Resource: "pods", Name: "web", Namespace: "ns"}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := q.ListRevisions(context.Background(), req)
		if err != nil || len(resp.GetRevisions()) != 101 {
			b.Fatal(err)
		}
	}
}

// revisionsClient calls the service directly, as the in-process channel
// does (without its interceptors).
type revisionsClient struct {
	fleetviewv1.QueryServiceClient
	q *queryService
}

func (c revisionsClient) ListRevisions(ctx context.Context, req *fleetviewv1.ListRevisionsRequest, _ ...grpc.CallOption) (*fleetviewv1.ListRevisionsResponse, error) {
	return c.q.ListRevisions(ctx, req)
}

// BenchmarkHistoryRevisionsREST is the hub's share of GET /v1/revisions
// for one object's 101 revisions, the store apart: the service and the
// REST writer (service), and a client's parse of the answer (parse).
func BenchmarkHistoryRevisionsREST(b *testing.B) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	revs := make([]query.Revision, 101)
	for i := range revs {
		revs[i] = query.Revision{Change: query.Change{Cluster: "m1", GVR: pods, Namespace: "ns", Name: "web", UID: "u", Seq: uint64(i + 1),
			Type: query.ChangeModified, Time: time.Unix(int64(i), 5), Labels: map[string]string{"app": "web", "rev": "x"}, Manager: "bench", Operation: "Update"},
			Object: podjson.Pod("m1", 7, i+1), Patch: []byte(`{"metadata":{"labels":{"rev":"x"},"resourceVersion":"12"}}`)}
	}
	h := rest.NewHistory(revisionsClient{q: historyService(&fakeHistory{answer: revs})}, http.NotFoundHandler())
	get := func() []byte {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/revisions/core/v1/pods/web?namespace=ns&limit=1000", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	b.Run("service", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			get()
		}
	})
	body := get()
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var page struct {
				Revisions []json.RawMessage `json:"revisions"`
			}
			if err := json.Unmarshal(body, &page); err != nil || len(page.Revisions) != 101 {
				b.Fatal(err)
			}
		}
	})
}
