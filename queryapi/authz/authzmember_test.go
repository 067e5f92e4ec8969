package authz

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// memberFleet: member1 lets alice list pods in shop, member2 in shop and
// payments; admins may do anything in member1 only.
func memberFleet(t *testing.T) *memberrbac.Members {
	t.Helper()
	m := &memberrbac.Members{}
	podReader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	bind := func(ns, name, user string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	}
	admins := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "admins"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "admins"}}}
	for _, o := range []struct {
		cluster string
		obj     any
	}{
		{"member1", podReader}, {"member1", bind("shop", "alice", "alice")}, {"member1", admins},
		{"member2", podReader}, {"member2", bind("shop", "alice", "alice")}, {"member2", bind("payments", "alice", "alice")},
	} {
		if err := m.Upsert(o.cluster, o.obj); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func memberGuard(t *testing.T, mode AuthorizationMode) *Guard {
	g := testGuard(t)
	g.Mode, g.Members = mode, memberFleet(t)
	return g
}

func TestGuardMemberRBAC(t *testing.T) {
	listInfo := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	items := [][]byte{raw("member1", "shop", "a"), raw("member2", "shop", "b"), raw("member1", "payments", "c"),
		raw("member2", "payments", "d"), raw("member1", "kube-system", "e"), raw("member3", "shop", "f")}
	cases := []struct {
		name     string
		mode     AuthorizationMode
		tok      string
		req      *fleetviewv1.ListRequest
		code     codes.Code
		want     string // names left after the filter
		clusters string // pushed down
	}{
		{"member-rbac: alice sees her namespaces in each member", ModeMemberRBAC, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,b,d", "member1,member2"},
		{"member-rbac: alice in payments: member2 only", ModeMemberRBAC, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "payments"}, codes.OK, "d", "member1,member2"},
		{"member-rbac: a namespace no member allows is forbidden", ModeMemberRBAC, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "kube-system"}, codes.PermissionDenied, "", ""},
		{"member-rbac: a resource no member allows is forbidden", ModeMemberRBAC, "alice-tok", &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments"}, codes.PermissionDenied, "", ""},
		{"member-rbac: bob has no binding anywhere", ModeMemberRBAC, "bob-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.PermissionDenied, "", ""},
		{"member-rbac: the policy's reach is not consulted", ModeMemberRBAC, "admin-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,c,e", "member1"},
		{"both: alice's policy (member1) and her bindings", ModeBoth, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a", "member1"},
		{"both: member2 asked, the policy forbids it", ModeBoth, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: []string{"member2"}}, codes.PermissionDenied, "", ""},
		{"both: bob's policy allows shop, no member does", ModeBoth, "bob-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.PermissionDenied, "", ""},
		{"policy: unchanged by the members", ModePolicy, "alice-tok", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, codes.OK, "a,c,e", "member1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := memberGuard(t, tc.mode)
			var seen *fleetviewv1.ListRequest
			var vis bool
			resp, err := g.Unary(withToken(tc.tok), tc.req, listInfo, func(ctx context.Context, req any) (any, error) {
				seen, vis = req.(*fleetviewv1.ListRequest), VisibleFrom(ctx) != nil
				var out [][]byte // the backend answers the namespace asked for
				for _, it := range items {
					if _, ns := rawLocation(it); tc.req.GetNamespace() == "" || ns == tc.req.GetNamespace() {
						out = append(out, it)
					}
				}
				return &fleetviewv1.ListResponse{RawItems: out}, nil
			})
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if seen != nil {
					t.Fatal("a refused request reached the service")
				}
				return
			}
			var names []string
			for _, it := range resp.(*fleetviewv1.ListResponse).GetRawItems() {
				names = append(names, string(rune('a'+indexOf(items, it))))
			}
			if got := strings.Join(names, ","); got != tc.want {
				t.Fatalf("items %s, want %s", got, tc.want)
			}
			if got := strings.Join(seen.GetClusters(), ","); got != tc.clusters {
				t.Fatalf("pushed-down clusters %q, want %q", got, tc.clusters)
			}
			if !vis {
				t.Fatal("the scope did not reach the backend as a visibility")
			}
		})
	}
}

var podsGR = schema.GroupResource{Resource: "pods"}

func indexOf(l [][]byte, b []byte) int {
	for i, x := range l {
		if string(x) == string(b) {
			return i
		}
	}
	return -1
}

func TestGuardMemberRBACGet(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	get := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Get"}
	cases := []struct {
		name string
		req  *fleetviewv1.GetRequest
		code codes.Code
	}{
		{"qualified, allowed", &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Cluster: "member2", Namespace: "payments", Name: "d"}, codes.OK},
		{"unqualified in a namespace some member allows", &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "payments", Name: "d"}, codes.OK},
		{"qualified where that member forbids: its 403, though member2 allows payments", &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Cluster: "member1", Namespace: "payments", Name: "c"}, codes.PermissionDenied},
		{"no member allows the namespace", &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "kube-system", Name: "e"}, codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *fleetviewv1.GetRequest
			_, err := g.Unary(withToken("alice-tok"), tc.req, get, func(ctx context.Context, req any) (any, error) {
				got = req.(*fleetviewv1.GetRequest)
				// The backend reads only visible copies: what it may read
				// is what the Guard handed it.
				clusters, all := VisibleFrom(ctx).ClustersOf(podsGR, got.GetNamespace())
				if all {
					t.Fatal("a Get under member RBAC reads every cluster")
				}
				if tc.req.GetCluster() != "" && (len(clusters) == 0 || !containsString(clusters, tc.req.GetCluster())) {
					return nil, status.Error(codes.NotFound, "not found")
				}
				c := tc.req.GetCluster()
				if c == "" {
					c = "member2" // where the object is
				}
				return &fleetviewv1.GetResponse{RawObject: raw(c, tc.req.GetNamespace(), tc.req.GetName()), Cluster: c}, nil
			})
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
		})
	}
}

// TestGuardMemberRBACPerCluster: a request naming one cluster (everything
// under /clusters/<member>/) is allowed or forbidden as that member alone
// answers it, for get, list and watch, namespaced and cluster-wide (issue
// #43: a list member1 forbids was answered 200 with nothing because
// member2 allows it), with kube-apiserver's message; the fleet view keeps
// the union.
func TestGuardMemberRBACPerCluster(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	// In member1 a RoleBinding in shop lets alice get namespaces: the
	// namespace shop itself, as kube-apiserver puts a namespace's name in
	// its request's namespace.
	for _, o := range []any{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ns-getter"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"namespaces"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "alice-ns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ns-getter"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}},
	} {
		if err := g.Members.Upsert("member1", o); err != nil {
			t.Fatal(err)
		}
	}
	const (
		list  = "/fleetview.v1.QueryService/List"
		watch = "/fleetview.v1.QueryService/Watch"
		get   = "/fleetview.v1.QueryService/Get"
	)
	alice := auth.User{Name: "alice"}
	lr := func(ns string, clusters ...string) *fleetviewv1.ListRequest {
		return &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: ns, Clusters: clusters}
	}
	wr := func(ns, fieldSel string, clusters ...string) *fleetviewv1.WatchRequest {
		return &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: ns, FieldSelector: fieldSel, Clusters: clusters}
	}
	for _, tc := range []struct {
		name   string
		u      auth.User
		method string
		req    any
		want   string // "" allowed, else the Status message
	}{
		{"list in payments in member1: member1's 403", alice, list, lr("payments", "member1"),
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "payments"`},
		{"list in payments in member2", alice, list, lr("payments", "member2"), ""},
		{"list in shop in member1", alice, list, lr("shop", "member1"), ""},
		{"list across namespaces in member2: not cluster-wide there", alice, list, lr("", "member2"),
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" at the cluster scope`},
		{"watch in payments in member1", alice, watch, wr("payments", "", "member1"),
			`pods is forbidden: User "alice" cannot watch resource "pods" in API group "" in the namespace "payments"`},
		{"watch of one pod in payments in member1: the name in the message", alice, watch, wr("payments", "metadata.name=c", "member1"),
			`pods "c" is forbidden: User "alice" cannot watch resource "pods" in API group "" in the namespace "payments"`},
		{"watch in shop in member1", alice, watch, wr("shop", "", "member1"), ""},
		{"get in payments in member1", alice, get, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Cluster: "member1", Namespace: "payments", Name: "c"},
			`pods "c" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "payments"`},
		{"get the namespace a RoleBinding in it grants", alice, get, &fleetviewv1.GetRequest{Version: "v1", Resource: "namespaces", Cluster: "member1", Name: "shop"}, ""},
		{"get another namespace", alice, get, &fleetviewv1.GetRequest{Version: "v1", Resource: "namespaces", Cluster: "member1", Name: "payments"},
			`namespaces "payments" is forbidden: User "alice" cannot get resource "namespaces" in API group "" in the namespace "payments"`},
		{"admins list everything in member1", auth.User{Name: "root", Groups: []string{"admins"}}, list, lr("", "member1"), ""},
		{"admins in member2, which does not bind them", auth.User{Name: "root", Groups: []string{"admins"}}, list, lr("", "member2"),
			`pods is forbidden: User "root" cannot list resource "pods" in API group "" at the cluster scope`},
		{"a member the hub holds no RBAC of", alice, list, lr("shop", "member9"),
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "shop": the hub holds no RBAC objects of cluster member9`},
		{"the fleet view keeps the union: payments", alice, list, lr("payments"), ""},
		{"the fleet view keeps the union: two clusters named", alice, list, lr("payments", "member1", "member2"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope, err := g.admit(context.Background(), tc.u, tc.method, tc.req)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("forbidden: %v", err)
				}
				return
			}
			st := status.Convert(apierr.ToStatus(err))
			if st.Code() != codes.PermissionDenied || st.Message() != tc.want || scope != nil {
				t.Fatalf("got %v %q (scope %v), want PermissionDenied %q", st.Code(), st.Message(), scope, tc.want)
			}
		})
	}
}

// TestGuardMemberRBACWatchNarrowedNotPerCluster: a fleet watch that the
// Guard narrows to the one cluster allowing it is judged again as the
// fleet watch it was, not as a watch of that cluster alone (which would
// forbid it across namespaces and end it at the next RBAC change).
func TestGuardMemberRBACWatchNarrowedNotPerCluster(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	// bob may watch pods in payments of member2, nowhere else.
	if err := g.Members.Upsert("member2", &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "bob"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}); err != nil {
		t.Fatal(err)
	}
	info := &grpc.StreamServerInfo{FullMethod: "/fleetview.v1.QueryService/Watch", IsServerStream: true}
	ss := &fakeStream{ctx: withToken("bob-tok"), req: &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"}}
	err := g.Stream(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		req := &fleetviewv1.WatchRequest{}
		if err := s.RecvMsg(req); err != nil {
			return err
		}
		if got := strings.Join(req.GetClusters(), ","); got != "member2" {
			return status.Errorf(codes.Internal, "narrowed to %q, want member2", got)
		}
		// An unrelated change: the watch is judged again.
		if err := g.Members.Upsert("member1", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}); err != nil {
			return err
		}
		return s.(*guardedStream).revoked()
	})
	if err != nil {
		t.Fatalf("the narrowed fleet watch was judged as member2's alone: %v", err)
	}
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestGuardMemberRBACWatchRevoked: a held watch ends with Forbidden when a
// member's RBAC takes its access away, with 410 Expired when it adds to
// it (the client lists again to see more), and runs on when a change
// neither takes from nor adds to what it watches.
func TestGuardMemberRBACWatchRevoked(t *testing.T) {
	rb := func(cluster, ns, name, user string) (string, *rbacv1.RoleBinding) {
		return cluster, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	}
	cases := []struct {
		name   string
		ns     string
		change func(m *memberrbac.Members) error
		code   codes.Code
	}{
		{"a binding deleted", "payments", func(m *memberrbac.Members) error {
			del, err := memberrbac.Named("rolebindings", "payments", "alice")
			if err != nil {
				return err
			}
			return m.Delete("member2", del)
		}, codes.PermissionDenied},
		{"a binding added where it watches", "payments", func(m *memberrbac.Members) error {
			return m.Upsert(rb("member1", "payments", "alice-too", "alice"))
		}, codes.OutOfRange},
		{"a binding added across all namespaces", "", func(m *memberrbac.Members) error {
			return m.Upsert(rb("member1", "kube-x", "alice-too", "alice"))
		}, codes.OutOfRange},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := memberGuard(t, ModeMemberRBAC)
			info := &grpc.StreamServerInfo{FullMethod: "/fleetview.v1.QueryService/Watch", IsServerStream: true}
			ended := make(chan error, 1)
			admitted := make(chan struct{})
			ss := &fakeStream{ctx: withToken("alice-tok"), req: &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: tc.ns}}
			go func() {
				ended <- g.Stream(nil, ss, info, func(_ any, s grpc.ServerStream) error {
					if err := s.RecvMsg(&fleetviewv1.WatchRequest{}); err != nil {
						return err
					}
					close(admitted)
					<-s.Context().Done() // a watch with no events: only its context ends it
					return context.Cause(s.Context())
				})
			}()
			<-admitted
			// Unrelated: bob's binding, another user's reach.
			if err := g.Members.Upsert(rb("member1", "payments", "bob", "bob")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ended:
				t.Fatalf("a change that neither took nor added ended the watch: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := tc.change(g.Members); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ended:
				if status.Code(err) != tc.code {
					t.Fatalf("ended with %v, want %v", err, tc.code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the watch went on after its access changed")
			}
		})
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	req  *fleetviewv1.WatchRequest
	sent int
}

func (f *fakeStream) Context() context.Context { return f.ctx }
func (f *fakeStream) RecvMsg(m any) error {
	proto.Merge(m.(*fleetviewv1.WatchRequest), f.req)
	return nil
}
func (f *fakeStream) SendMsg(any) error { f.sent++; return nil }

func TestIntersectScopes(t *testing.T) {
	p := func(c, n []string) auth.ClusterNamespaces { return auth.ClusterNamespaces{Clusters: c, Namespaces: n} }
	l := func(s ...string) []string { return s }
	cases := []struct {
		name string
		a, b *auth.Scope
		want string
	}{
		{"nil is everything", nil, &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("a"), nil)}}, "a/"},
		{"clusters meet", &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("a", "b"), nil)}}, &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("b", "c"), l("x"))}}, "b/x"},
		{"disjoint clusters: nothing, not everything", &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("a"), nil)}}, &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("b"), nil)}}, ""},
		{"disjoint namespaces: nothing", &auth.Scope{Pairs: []auth.ClusterNamespaces{p(nil, l("x"))}}, &auth.Scope{Pairs: []auth.ClusterNamespaces{p(nil, l("y"))}}, ""},
		{"pairwise", &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("a"), nil), p(nil, l("x"))}}, &auth.Scope{Pairs: []auth.ClusterNamespaces{p(l("b"), l("y"))}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, q := range intersectScopes(tc.a, tc.b).Pairs {
				parts = append(parts, strings.Join(q.Clusters, ",")+"/"+strings.Join(q.Namespaces, ","))
			}
			if got := strings.Join(parts, ";"); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGuardMemberRBACSearch(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Search"}
	hit := func(group, resource, cluster, ns string) *fleetviewv1.SearchHit {
		return &fleetviewv1.SearchHit{Cluster: cluster, Gvr: &fleetviewv1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}, RawObject: raw(cluster, ns, "x")}
	}
	hits := []*fleetviewv1.SearchHit{hit("core", "pods", "member1", "shop"), hit("core", "pods", "member1", "payments"),
		hit("core", "pods", "member2", "payments"), hit("apps", "deployments", "member2", "payments")}
	where := func(h *fleetviewv1.SearchHit) string {
		_, ns := rawLocation(h.GetRawObject())
		return h.GetGvr().GetResource() + "@" + h.GetCluster() + "/" + ns
	}
	cases := []struct {
		name      string
		mode      AuthorizationMode
		tok       string
		resources []string
		code      codes.Code
		want      string // the hits the backend may return
	}{
		{"member-rbac, pods named", ModeMemberRBAC, "alice-tok", []string{"core/v1/pods"}, codes.OK, "pods@member1/shop,pods@member2/payments"},
		{"member-rbac, every served resource", ModeMemberRBAC, "alice-tok", nil, codes.OK, "pods@member1/shop,pods@member2/payments"},
		{"member-rbac, nothing listable", ModeMemberRBAC, "alice-tok", []string{"apps/v1/deployments"}, codes.PermissionDenied, ""},
		{"both: the policy keeps alice in member1", ModeBoth, "alice-tok", []string{"core/v1/pods"}, codes.OK, "pods@member1/shop"},
		{"both: admins' member grant, policy everything", ModeBoth, "admin-tok", nil, codes.OK, "pods@member1/shop,pods@member1/payments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := memberGuard(t, tc.mode)
			g.served = func() []schema.GroupResource {
				return []schema.GroupResource{podsGR, {Group: "apps", Resource: "deployments"}}
			}
			var vis *query.Visibility
			resp, err := g.Unary(withToken(tc.tok), &fleetviewv1.SearchRequest{Text: "x", Resources: tc.resources}, info, func(ctx context.Context, _ any) (any, error) {
				vis = VisibleFrom(ctx)
				return &fleetviewv1.SearchResponse{Items: slices.Clone(hits)}, nil
			})
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if err != nil {
				return
			}
			var got, backend []string
			for _, h := range resp.(*fleetviewv1.SearchResponse).GetItems() {
				got = append(got, where(h))
			}
			for _, h := range hits {
				_, ns := rawLocation(h.GetRawObject())
				if vis.Allows(hitResource(h), h.GetCluster(), ns) {
					backend = append(backend, where(h))
				}
			}
			if strings.Join(got, ",") != tc.want || strings.Join(backend, ",") != tc.want {
				t.Fatalf("hits %v, the backend's visibility %v; want %s", got, backend, tc.want)
			}
		})
	}
}

// TestGuardMemberRBACClusterScoped: a RoleBinding never grants a
// cluster-scoped resource (a member asks about it cluster-wide), so a list
// only RoleBindings name is Forbidden, as the member answers, and a
// ClusterRoleBinding allows it in its own cluster only.
func TestGuardMemberRBACClusterScoped(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	nodes := schema.GroupResource{Resource: "nodes"}
	g.clusterScoped = func(gr schema.GroupResource) bool { return gr == nodes }
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}}
	inShop := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "alice-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	admins := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "admins-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "admins"}}}
	for _, o := range []any{reader, inShop, admins} {
		if err := g.Members.Upsert("member1", o); err != nil {
			t.Fatal(err)
		}
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	for _, tc := range []struct {
		tok      string
		code     codes.Code
		clusters string
	}{{"alice-tok", codes.PermissionDenied, ""}, {"admin-tok", codes.OK, "member1"}} {
		var seen *fleetviewv1.ListRequest
		_, err := g.Unary(withToken(tc.tok), &fleetviewv1.ListRequest{Version: "v1", Resource: "nodes"}, info, func(_ context.Context, req any) (any, error) {
			seen = req.(*fleetviewv1.ListRequest)
			return &fleetviewv1.ListResponse{}, nil
		})
		if status.Code(err) != tc.code || err == nil && strings.Join(seen.GetClusters(), ",") != tc.clusters {
			t.Fatalf("%s: %v (clusters %v), want %v in %q", tc.tok, err, seen.GetClusters(), tc.code, tc.clusters)
		}
	}
}

// TestGuardMemberRBACIdentityMap: with a map, each member decides for the
// caller's identity there: member2 knows alice as oidc:alice, whom it
// binds nowhere, so her reach is member1's alone for lists, and a get
// naming member2 is member2's 403 for oidc:alice.
func TestGuardMemberRBACIdentityMap(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	g.Members.Map = &memberrbac.IdentityMap{Rules: []memberrbac.MapRule{{Clusters: []string{"member2"}, UserPrefix: "oidc:"}}}
	var seen *fleetviewv1.ListRequest
	_, err := g.Unary(withToken("alice-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"},
		func(_ context.Context, req any) (any, error) {
			seen = req.(*fleetviewv1.ListRequest)
			return &fleetviewv1.ListResponse{}, nil
		})
	if err != nil || strings.Join(seen.GetClusters(), ",") != "member1" {
		t.Fatalf("alice's list: %v in %v, want member1 only", err, seen.GetClusters())
	}
	_, err = g.Unary(withToken("alice-tok"), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Cluster: "member2", Namespace: "shop", Name: "b"},
		&grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/Get"}, func(ctx context.Context, _ any) (any, error) {
			t.Fatal("a get member2 forbids reached the service")
			return nil, nil
		})
	if want := `pods "b" is forbidden: User "oidc:alice" cannot get resource "pods" in API group "" in the namespace "shop"`; status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != want {
		t.Fatalf("alice's get in member2: %v, want PermissionDenied %q", err, want)
	}
}

// TestGuardMemberRBACNamed: a rule limited to resourceNames allows a list
// (or watch) of that one object in one cluster, as the member authorizes
// it with the name the field selector requires; not another name, and not
// across the fleet (the collection's answer, which it does not allow).
func TestGuardMemberRBACNamed(t *testing.T) {
	g := memberGuard(t, ModeMemberRBAC)
	one := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-x", Name: "one-pod"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: []string{"only-this"}}}}
	bind := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-x", Name: "alice-one"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "one-pod"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	for _, o := range []any{one, bind} {
		if err := g.Members.Upsert("member1", o); err != nil {
			t.Fatal(err)
		}
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/fleetview.v1.QueryService/List"}
	for _, tc := range []struct {
		name     string
		clusters []string
		field    string
		code     codes.Code
	}{
		{"that name in member1", []string{"member1"}, "metadata.name=only-this", codes.OK},
		{"that name, == spelling", []string{"member1"}, "metadata.name==only-this", codes.OK},
		{"another name", []string{"member1"}, "metadata.name=other", codes.PermissionDenied},
		{"not a name", []string{"member1"}, "spec.nodeName=n1", codes.PermissionDenied},
		{"across the fleet", nil, "metadata.name=only-this", codes.PermissionDenied},
		{"in member2, which has no such rule", []string{"member2"}, "metadata.name=only-this", codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "kube-x", Clusters: tc.clusters, FieldSelector: tc.field}
			_, err := g.Unary(withToken("alice-tok"), req, info, func(context.Context, any) (any, error) { return &fleetviewv1.ListResponse{}, nil })
			if status.Code(err) != tc.code {
				t.Fatalf("%v, want %v", err, tc.code)
			}
		})
	}
}

// TestCatalogVisibilityNamedCluster: under member-rbac the cluster a
// request names (/clusters/<member>/...) is known to any caller, so that
// member's refusal is its 403 rather than a 404 of an unknown cluster; the
// fleet view, other clusters and the both mode (whose policy keeps cluster
// names) still show only clusters where the caller may read something.
func TestCatalogVisibilityNamedCluster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    AuthorizationMode
		path    string
		cluster string
		want    bool
	}{
		{"member-rbac, the named cluster", ModeMemberRBAC, "/clusters/member1/api/v1/pods", "member1", true},
		{"member-rbac, another cluster", ModeMemberRBAC, "/clusters/member1/api/v1/pods", "member2", false},
		{"member-rbac, the fleet view", ModeMemberRBAC, "/api/v1/pods", "member1", false},
		{"both: the policy keeps cluster names", ModeBoth, "/clusters/member1/api/v1/pods", "member1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := memberGuard(t, tc.mode)
			r := httptest.NewRequest("GET", tc.path, nil)
			r.Header.Set("Authorization", "Bearer bob-tok") // no member binds bob
			vis, err := g.CatalogVisibility(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := vis(tc.cluster, podsGR); got != tc.want {
				t.Fatalf("visible %v, want %v", got, tc.want)
			}
		})
	}
}
