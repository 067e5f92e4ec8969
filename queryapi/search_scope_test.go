package queryapi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// TestGuardSearchVisibility: the Guard hands a search the caller's whole
// scope (the backend applies it before the limit) and narrows the clusters
// it reads; a caller without any search rule is refused.
func TestGuardSearchVisibility(t *testing.T) {
	g := testGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Search"}
	cases := []struct {
		name, tok string
		req       *fleetviewv1.SearchRequest
		code      codes.Code
		clusters  []string // pushed into the request
		visible   map[[3]string]bool
		nilVis    bool
	}{
		{name: "admin sees everything", tok: "admin-tok", req: &fleetviewv1.SearchRequest{Text: "x"}, nilVis: true},
		{name: "cluster-scoped user", tok: "alice-tok", req: &fleetviewv1.SearchRequest{Text: "x"}, clusters: []string{"member1"},
			visible: map[[3]string]bool{{"pods", "member1", "shop"}: true, {"pods", "member2", "shop"}: false, {"deployments.apps", "member1", "shop"}: false}},
		{name: "cluster-scoped user asks another cluster", tok: "alice-tok", req: &fleetviewv1.SearchRequest{Text: "x", Clusters: []string{"member2"}}, code: codes.PermissionDenied},
		{name: "namespace-scoped user", tok: "bob-tok", req: &fleetviewv1.SearchRequest{Text: "x"},
			visible: map[[3]string]bool{{"pods", "member9", "shop"}: true, {"pods", "member9", "payments"}: false, {"secrets", "member9", "shop"}: false}},
		{name: "no search rule", tok: "ops-tok", req: &fleetviewv1.SearchRequest{Text: "x"}, code: codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reached bool
			var vis *query.Visibility
			h := func(ctx context.Context, _ any) (any, error) {
				reached, vis = true, authz.VisibleFrom(ctx)
				return &fleetviewv1.SearchResponse{}, nil
			}
			_, err := g.Unary(withToken(tc.tok), tc.req, info, h)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if reached {
					t.Fatal("a refused search reached the service")
				}
				return
			}
			if !slices.Equal(tc.req.GetClusters(), tc.clusters) {
				t.Fatalf("pushed-down clusters %v, want %v", tc.req.GetClusters(), tc.clusters)
			}
			if tc.nilVis != (vis == nil) {
				t.Fatalf("visibility %v, want nil=%v", vis, tc.nilVis)
			}
			for loc, want := range tc.visible {
				if got := vis.Allows(schema.ParseGroupResource(loc[0]), loc[1], loc[2]); got != want {
					t.Errorf("%v visible=%v, want %v", loc, got, want)
				}
			}
		})
	}
}

// fakeSearcher records what a search asked the backend.
type fakeSearcher struct{ got query.SearchOptions }

func (f *fakeSearcher) Search(_ context.Context, o query.SearchOptions) (query.Page, error) {
	f.got = o
	return query.Page{Continue: "backend-cursor"}, nil
}

// TestSearchCarriesVisibility: the service passes the visibility to the
// backend and binds the continue token to it, so a page is never
// continued under another caller's scope.
func TestSearchCarriesVisibility(t *testing.T) {
	fs := &fakeSearcher{}
	q := &queryService{searcher: fs, sealer: query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), versions: newVersionBook(nil, query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), 0, 0)}
	shop := &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"shop"}}}}
	payments := &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"payments"}}}}
	ctx := authz.WithVisibility(context.Background(), shop)
	resp, err := q.search(ctx, &fleetviewv1.SearchRequest{Text: "web", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if fs.got.Visible != shop {
		t.Fatalf("backend got visibility %v, want the caller's", fs.got.Visible)
	}
	next := &fleetviewv1.SearchRequest{Text: "web", Limit: 10, Continue: resp.GetContinue()}
	if _, err := q.search(ctx, next); err != nil {
		t.Fatalf("same caller continues: %v", err)
	}
	if fs.got.Continue != "backend-cursor" {
		t.Fatalf("backend cursor %q", fs.got.Continue)
	}
	for name, c := range map[string]context.Context{
		"another scope": authz.WithVisibility(context.Background(), payments),
		"no scope":      context.Background(),
	} {
		if _, err := q.search(c, next); !errors.Is(err, query.ErrInvalid) || !strings.Contains(err.Error(), "other filters") {
			t.Errorf("%s continues a token issued under another visibility: %v", name, err)
		}
	}
}

// TestGuardListVisibility: a list, like a search, carries the caller's
// scope of its resource into the backend (namespaces included), so pages
// stay full and tokens and remaining counts reflect visible objects only.
func TestGuardListVisibility(t *testing.T) {
	g := testGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	cases := []struct {
		tok     string
		nilVis  bool
		visible map[[2]string]bool
	}{
		{tok: "admin-tok", nilVis: true},
		{tok: "alice-tok", visible: map[[2]string]bool{{"member1", "x"}: true, {"member2", "x"}: false}},
		{tok: "bob-tok", visible: map[[2]string]bool{{"member9", "shop"}: true, {"member9", "payments"}: false}},
	}
	for _, tc := range cases {
		var vis *query.Visibility
		h := func(ctx context.Context, _ any) (any, error) {
			vis = authz.VisibleFrom(ctx)
			return &fleetviewv1.ListResponse{}, nil
		}
		if _, err := g.Unary(withToken(tc.tok), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, info, h); err != nil {
			t.Fatalf("%s: %v", tc.tok, err)
		}
		if tc.nilVis != (vis == nil) {
			t.Fatalf("%s: visibility %v, want nil=%v", tc.tok, vis, tc.nilVis)
		}
		for loc, want := range tc.visible {
			if got := vis.Allows(schema.GroupResource{Resource: "pods"}, loc[0], loc[1]); got != want {
				t.Errorf("%s: %v visible=%v, want %v", tc.tok, loc, got, want)
			}
		}
	}
}

// fakeReader records what a list asked the backend.
type fakeReader struct{ got query.ListOptions }

func (f *fakeReader) Get(context.Context, query.GetOptions) (query.Object, error) {
	return query.Object{}, query.ErrNotFound
}

func (f *fakeReader) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	f.got = o
	return query.Page{Continue: "backend-cursor"}, nil
}

func (f *fakeReader) Versions(context.Context) (query.Version, error) { return query.Version{}, nil }

// TestListCarriesVisibility: the list service hands the visibility to the
// backend and binds its continue token to it.
func TestListCarriesVisibility(t *testing.T) {
	fr := &fakeReader{}
	q := &queryService{reader: fr, sealer: query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), versions: newVersionBook(nil, query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), 0, 0)}
	shop := &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"shop"}}}}
	ctx := authz.WithVisibility(context.Background(), shop)
	resp, err := q.list(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if fr.got.Visible != shop {
		t.Fatalf("backend got visibility %v", fr.got.Visible)
	}
	next := &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 5, Continue: resp.GetContinue()}
	if _, err := q.list(ctx, next); err != nil {
		t.Fatalf("same caller continues: %v", err)
	}
	other := authz.WithVisibility(context.Background(), &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"payments"}}}})
	if _, err := q.list(other, next); !errors.Is(err, query.ErrInvalid) {
		t.Fatalf("another scope continues the token: %v", err)
	}
}
