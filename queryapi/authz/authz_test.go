package authz

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fleetview/fleetview/internal/auth"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func testGuard(t *testing.T) *Guard {
	t.Helper()
	tokens, err := auth.LoadTokens(strings.NewReader("admin-tok,root,1,admins\nalice-tok,alice\nbob-tok,bob\nops-tok,ops\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := &auth.Policy{Rules: []auth.Rule{
		{Groups: []string{"admins"}, Verbs: []string{"*"}, Resources: []string{"*", "secrets"}},
		{Users: []string{"alice"}, Verbs: []string{"get", "list", "watch", "search"}, Resources: []string{"pods"}, Clusters: []string{"member1"}},
		{Users: []string{"bob"}, Verbs: []string{"list", "search"}, Resources: []string{"pods"}, Namespaces: []string{"shop"}},
		{Users: []string{"ops"}, Verbs: []string{"registry-admin"}, Resources: []string{"registries"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return &Guard{Tokens: tokens, Authorizer: auth.NewAuthorizer(p)}
}

func withToken(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

func obj(t *testing.T, cluster, ns, name string) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"metadata": map[string]any{"name": name, "namespace": ns,
		"annotations": map[string]any{"fleetview.io/cluster": cluster}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func raw(cluster, ns, name string) []byte {
	return []byte(`{"metadata":{"name":"` + name + `","namespace":"` + ns + `","annotations":{"fleetview.io/cluster":"` + cluster + `"}}}`)
}

func TestGuardUnary(t *testing.T) {
	g := testGuard(t)
	listInfo := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	everything := func(_ context.Context, req any) (any, error) {
		return &fleetviewv1.ListResponse{
			Items:    []*structpb.Struct{obj(t, "member1", "shop", "a"), obj(t, "member2", "shop", "b"), obj(t, "member1", "kube-system", "c")},
			RawItems: [][]byte{raw("member1", "shop", "a"), raw("member2", "shop", "b"), raw("member1", "kube-system", "c")},
		}, nil
	}
	var seen *fleetviewv1.ListRequest
	recording := func(ctx context.Context, req any) (any, error) {
		seen = req.(*fleetviewv1.ListRequest)
		return everything(ctx, req)
	}
	names := func(r any) string {
		var out []string
		for _, it := range r.(*fleetviewv1.ListResponse).GetItems() {
			out = append(out, it.GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue())
		}
		return strings.Join(out, ",") + "|" + string(rune('0'+len(r.(*fleetviewv1.ListResponse).GetRawItems())))
	}

	cases := []struct {
		name     string
		ctx      context.Context
		req      *fleetviewv1.ListRequest
		code     codes.Code
		want     string
		clusters string
	}{
		{"no credentials", context.Background(), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.Unauthenticated, "", ""},
		{"unknown token", withToken("nope"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.Unauthenticated, "", ""},
		{"admin sees all", withToken("admin-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,b,c|3", ""},
		{"alice pushed down to member1", withToken("alice-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,c|2", "member1"},
		{"alice asks for member2 only", withToken("alice-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: []string{"member2"}}, codes.PermissionDenied, "", ""},
		{"alice other resource", withToken("alice-tok"), &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments"}, codes.PermissionDenied, "", ""},
		{"bob filtered to shop", withToken("bob-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,b|2", ""},
		{"bob secrets via star", withToken("bob-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "secrets"}, codes.PermissionDenied, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen = nil
			resp, err := g.Unary(tc.ctx, tc.req, listInfo, recording)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if seen != nil {
					t.Fatal("a refused request reached the service")
				}
				return
			}
			if got := names(resp); got != tc.want {
				t.Fatalf("items %s, want %s", got, tc.want)
			}
			if got := strings.Join(seen.GetClusters(), ","); got != tc.clusters {
				t.Fatalf("pushed-down clusters %q, want %q", got, tc.clusters)
			}
		})
	}

	t.Run("unqualified get outside scope is not found", func(t *testing.T) {
		get := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Get"}
		h := func(context.Context, any) (any, error) {
			return &fleetviewv1.GetResponse{Object: obj(t, "member2", "shop", "a"), Cluster: "member2"}, nil
		}
		_, err := g.Unary(withToken("alice-tok"), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "shop", Name: "a"}, get, h)
		if status.Code(err) != codes.NotFound {
			t.Fatalf("got %v, want NotFound", err)
		}
	})

	t.Run("registry writes need the registry-admin verb by name", func(t *testing.T) {
		h := func(context.Context, any) (any, error) { return &fleetviewv1.Registry{}, nil }
		for _, tc := range []struct {
			method, tok string
			req         any
			code        codes.Code
		}{
			{"ApplyRegistry", "alice-tok", &fleetviewv1.ApplyRegistryRequest{}, codes.PermissionDenied},
			// A "*" verb grants reads only: a registry write can point the
			// hub at any OpenSearch with any mounted Secret.
			{"ApplyRegistry", "admin-tok", &fleetviewv1.ApplyRegistryRequest{}, codes.PermissionDenied},
			{"DeleteRegistry", "admin-tok", &fleetviewv1.DeleteRegistryRequest{Name: "x"}, codes.PermissionDenied},
			{"ListRegistries", "admin-tok", &fleetviewv1.ListRegistriesRequest{}, codes.OK},
			{"ApplyRegistry", "ops-tok", &fleetviewv1.ApplyRegistryRequest{}, codes.OK},
			{"DeleteRegistry", "ops-tok", &fleetviewv1.DeleteRegistryRequest{Name: "x"}, codes.OK},
			{"ListRegistries", "ops-tok", &fleetviewv1.ListRegistriesRequest{}, codes.PermissionDenied},
		} {
			info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.RegistryService/" + tc.method}
			if _, err := g.Unary(withToken(tc.tok), tc.req, info, h); status.Code(err) != tc.code {
				t.Errorf("%s by %s: %v, want %v", tc.method, tc.tok, err, tc.code)
			}
		}
	})

	t.Run("search hits judged per resource", func(t *testing.T) {
		search := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Search"}
		h := func(context.Context, any) (any, error) {
			return &fleetviewv1.SearchResponse{Items: []*fleetviewv1.SearchHit{
				{Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Cluster: "member1", Object: obj(t, "member1", "shop", "a")},
				{Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Cluster: "member2", Object: obj(t, "member2", "shop", "b")},
				{Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Cluster: "member1", Object: obj(t, "member1", "shop", "s")},
			}}, nil
		}
		resp, err := g.Unary(withToken("alice-tok"), &fleetviewv1.SearchRequest{Text: "a"}, search, h)
		if err != nil {
			t.Fatal(err)
		}
		if items := resp.(*fleetviewv1.SearchResponse).GetItems(); len(items) != 1 || items[0].GetCluster() != "member1" {
			t.Fatalf("alice search hits %v", items)
		}
	})

	t.Run("health is open", func(t *testing.T) {
		h := func(context.Context, any) (any, error) { return "ok", nil }
		if _, err := g.Unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}, h); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGuardWatchFilter(t *testing.T) {
	s := auth.Scope{Pairs: []auth.ClusterNamespaces{{Clusters: []string{"member1"}}}}
	if err := filter(&s, &fleetviewv1.WatchEvent{Type: "BOOKMARK", Object: obj(t, "", "", "")}); err != nil {
		t.Fatal("bookmarks must pass")
	}
	if err := filter(&s, &fleetviewv1.WatchEvent{Type: "ADDED", Cluster: "member2", Object: obj(t, "member2", "x", "y")}); err == nil {
		t.Fatal("an event outside the scope passed")
	}
	if err := filter(&s, &fleetviewv1.WatchEvent{Type: "ADDED", Cluster: "member1", Object: obj(t, "member1", "x", "y")}); err != nil {
		t.Fatal(err)
	}
}

// TestGuardDiscoveryView: a caller who may not list clusters still gets
// what Kubernetes discovery needs, reduced to the clusters in which some
// rule lets them read something, with nothing else of the inventory.
func TestGuardDiscoveryView(t *testing.T) {
	g := testGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: fleetviewv1.ClusterService_ListClusters_FullMethodName}
	res := func(group, resource, kind string) *fleetviewv1.ResourceSyncState {
		return &fleetviewv1.ResourceSyncState{Gvr: &fleetviewv1.GroupVersionResource{Group: group, Version: "v1", Resource: resource},
			Kind: kind, Namespaced: true, Synced: true, ObjectCount: 7, ShortNames: []string{resource[:2]}}
	}
	inventory := func(context.Context, any) (any, error) {
		var cs []*fleetviewv1.Cluster
		for _, name := range []string{"member1", "member2"} {
			cs = append(cs, &fleetviewv1.Cluster{Name: name, Labels: map[string]string{"env": "prod"}, Region: "eu", Ready: true,
				KubernetesVersion: "v1.37.2", ObjectCount: 21,
				Resources: []*fleetviewv1.ResourceSyncState{res("core", "pods", "Pod"), res("core", "secrets", "Secret"), res("apps", "deployments", "Deployment")}})
		}
		return &fleetviewv1.ListClustersResponse{Clusters: cs}, nil
	}
	view := func(r any) string {
		var out []string
		for _, c := range r.(*fleetviewv1.ListClustersResponse).GetClusters() {
			var rs []string
			for _, s := range c.GetResources() {
				rs = append(rs, s.GetGvr().GetResource())
			}
			out = append(out, c.GetName()+"["+strings.Join(rs, " ")+"]")
		}
		return strings.Join(out, ",")
	}
	cases := []struct {
		name string
		ctx  context.Context
		code codes.Code
		want string
		full bool // the whole inventory record, labels included
	}{
		{"no credentials", context.Background(), codes.Unauthenticated, "", false},
		{"admin lists clusters", withToken("admin-tok"), codes.OK, "member1[pods secrets deployments],member2[pods secrets deployments]", true},
		{"alice: pods in member1", withToken("alice-tok"), codes.OK, "member1[pods secrets deployments]", false},
		{"bob: pods in every cluster (namespace shop)", withToken("bob-tok"), codes.OK, "member1[pods secrets deployments],member2[pods secrets deployments]", false},
		{"ops reads nothing", withToken("ops-tok"), codes.OK, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := g.Unary(tc.ctx, &fleetviewv1.ListClustersRequest{}, info, inventory)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				return
			}
			if got := view(resp); got != tc.want {
				t.Fatalf("clusters %s, want %s", got, tc.want)
			}
			for _, c := range resp.(*fleetviewv1.ListClustersResponse).GetClusters() {
				if hasLabels := len(c.GetLabels()) > 0; hasLabels != tc.full {
					t.Fatalf("cluster %s labels %v: want the full record %v", c.GetName(), c.GetLabels(), tc.full)
				}
				if !tc.full && (c.GetRegion() != "" || c.GetResources()[0].GetObjectCount() != 0 || c.GetKubernetesVersion() != "v1.37.2" || c.GetResources()[0].GetShortNames()[0] != "po") {
					t.Fatalf("discovery view of %s holds more or less than discovery needs: %v", c.GetName(), c)
				}
			}
		})
	}
}

// TestKeepRawKeepsPairs: what a scope drops from a raw list drops its
// cells and row spans with it, so each kept item keeps its own.
func TestKeepRawKeepsPairs(t *testing.T) {
	var items, cells [][]byte
	var spans []uint32
	for i, c := range []string{"c1", "c2", "c1", "c3", "c1"} {
		items = append(items, fmt.Appendf(nil, `{"metadata":{"name":"p%d","namespace":"ns","annotations":{"fleetview.io/cluster":%q}}}`, i, c))
		cells = append(cells, fmt.Appendf(nil, `["p%d"]`, i))
		for j := range 8 {
			spans = append(spans, uint32(10*i+j))
		}
	}
	s := &auth.Scope{Pairs: []auth.ClusterNamespaces{{Clusters: []string{"c1"}}}}
	items, cells, spans = keepRaw(s, items, cells, spans)
	if len(items) != 3 || len(cells) != 3 || len(spans) != 24 {
		t.Fatalf("kept %d items, %d cells, %d spans; want 3, 3, 24", len(items), len(cells), len(spans))
	}
	for k, i := range []int{0, 2, 4} {
		if !bytes.Contains(items[k], fmt.Appendf(nil, `"name":"p%d"`, i)) || string(cells[k]) != fmt.Sprintf(`["p%d"]`, i) || spans[8*k] != uint32(10*i) || spans[8*k+7] != uint32(10*i+7) {
			t.Fatalf("kept #%d: %s %s %v, want item p%d's", k, items[k], cells[k], spans[8*k:8*k+8], i)
		}
	}
}
