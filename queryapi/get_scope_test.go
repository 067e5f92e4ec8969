package queryapi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// copiesReader holds Pods by cluster and answers Get as the backends do:
// only the copies the caller may see count. leaky ignores the visibility,
// like a backend that forgot it, for the Guard's own check.
type copiesReader struct {
	emptyReader
	copies map[string][]string // namespace/name -> clusters
	leaky  bool
	got    query.GetOptions
}

func (r *copiesReader) Get(_ context.Context, o query.GetOptions) (query.Object, error) {
	r.got = o
	var in []string
	for _, c := range r.copies[o.Namespace+"/"+o.Name] {
		if (o.Cluster == "" || c == o.Cluster) && (r.leaky || o.Sees(c)) {
			in = append(in, c)
		}
	}
	switch len(in) {
	case 0:
		return query.Object{}, o.NotFound()
	case 1:
		return query.Object{Cluster: in[0], JSON: raw(in[0], o.Namespace, o.Name)}, nil
	}
	slices.Sort(in)
	return query.Object{}, o.Conflict(in)
}

func scopeGuard(t *testing.T) *authz.Guard {
	t.Helper()
	tokens, err := auth.LoadTokens(strings.NewReader("admin-tok,root,1,admins\nalice-tok,alice\nfrank-tok,frank\ndave-tok,dave\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := &auth.Policy{Rules: []auth.Rule{
		{Groups: []string{"admins"}, Verbs: []string{"*"}, Resources: []string{"*"}},
		{Users: []string{"alice"}, Verbs: []string{"get", "watch"}, Resources: []string{"pods"}, Clusters: []string{"member1"}},
		{Users: []string{"frank"}, Verbs: []string{"get"}, Resources: []string{"pods"}, Clusters: []string{"member1", "member2"}},
		{Users: []string{"dave"}, Verbs: []string{"get", "watch"}, Resources: []string{"pods"}, Namespaces: []string{"shop"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return &authz.Guard{Tokens: tokens, Authorizer: auth.NewAuthorizer(p)}
}

// TestGetScope: a Get goes through the Guard and the service to a backend
// narrowed to the caller's scope. An ambiguity names visible clusters only,
// one visible copy is the answer whatever hidden clusters hold, and a
// hidden object is not found with the very status of a missing one.
func TestGetScope(t *testing.T) {
	g := scopeGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: fleetviewv1.QueryService_Get_FullMethodName}
	copies := map[string][]string{
		"payments/only-2-3":       {"member2", "member3"},
		"kube-system/etcd-backup": {"member1", "member2", "member3"},
		"shop/everywhere":         {"member1", "member2", "member3"},
		"shop/only-3":             {"member3"},
	}
	cases := []struct {
		name, tok, ns, obj, cluster string
		leaky                       bool
		code                        codes.Code
		from                        string // OK: the answering cluster
		msg                         string // else the exact message
	}{
		{"admin: ambiguous in every cluster", "admin-tok", "kube-system", "etcd-backup", "", false, codes.Aborted, "",
			`ambiguous object: pods "kube-system/etcd-backup" found in clusters [member1, member2, member3]`},
		{"cluster-scoped: hidden copies only", "alice-tok", "payments", "only-2-3", "", false, codes.NotFound, "", `pods "only-2-3" not found`},
		{"cluster-scoped: missing", "alice-tok", "payments", "nope", "", false, codes.NotFound, "", `pods "nope" not found`},
		{"cluster-scoped: hidden cluster named", "alice-tok", "payments", "only-2-3", "member2", false, codes.NotFound, "", `pods "only-2-3" not found`},
		{"cluster-scoped: missing in a hidden cluster", "alice-tok", "payments", "nope", "member2", false, codes.NotFound, "", `pods "nope" not found`},
		{"cluster-scoped: a leaky backend's hidden copy", "alice-tok", "payments", "only-2-3", "member2", true, codes.NotFound, "", `pods "only-2-3" not found`},
		{"cluster-scoped: one visible copy and two hidden", "alice-tok", "kube-system", "etcd-backup", "", false, codes.OK, "member1", ""},
		{"clusters-scoped: the 409 names visible clusters", "frank-tok", "kube-system", "etcd-backup", "", false, codes.Aborted, "",
			`ambiguous object: pods "kube-system/etcd-backup" found in clusters [member1, member2]`},
		{"clusters-scoped: one visible copy and a hidden one", "frank-tok", "payments", "only-2-3", "", false, codes.OK, "member2", ""},
		{"clusters-scoped: hidden", "frank-tok", "shop", "only-3", "", false, codes.NotFound, "", `pods "only-3" not found`},
		{"namespace-scoped: hidden in three clusters", "dave-tok", "kube-system", "etcd-backup", "", false, codes.NotFound, "", `pods "etcd-backup" not found`},
		{"namespace-scoped: missing in a hidden namespace", "dave-tok", "kube-system", "nope", "", false, codes.NotFound, "", `pods "nope" not found`},
		{"namespace-scoped: hidden, cluster named", "dave-tok", "kube-system", "etcd-backup", "member1", false, codes.NotFound, "", `pods "etcd-backup" not found`},
		{"namespace-scoped: ambiguous in its namespace", "dave-tok", "shop", "everywhere", "", false, codes.Aborted, "",
			`ambiguous object: pods "shop/everywhere" found in clusters [member1, member2, member3]`},
		{"namespace-scoped: visible", "dave-tok", "shop", "only-3", "", false, codes.OK, "member3", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &copiesReader{copies: copies, leaky: tc.leaky}
			q := &queryService{reader: r}
			h := func(ctx context.Context, req any) (any, error) { return q.Get(ctx, req.(*fleetviewv1.GetRequest)) }
			req := &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: tc.ns, Name: tc.obj, Cluster: tc.cluster}
			resp, err := g.Unary(withToken(tc.tok), req, info, h)
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tc.code)
			}
			if tc.code == codes.OK {
				if got := resp.(*fleetviewv1.GetResponse).GetCluster(); got != tc.from {
					t.Fatalf("answered from %s, want %s", got, tc.from)
				}
				return
			}
			if st.Message() != tc.msg {
				t.Fatalf("message %q, want %q", st.Message(), tc.msg)
			}
			// Hidden and missing share the whole status: code, message and
			// the ErrorInfo the HTTP boundaries map from.
			if tc.code == codes.NotFound {
				missing := status.Convert(apierr.ToStatus(query.NotFoundError(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, tc.obj)))
				if !proto.Equal(st.Proto(), missing.Proto()) {
					t.Fatalf("status %v, want a missing object's %v", st.Proto(), missing.Proto())
				}
			}
		})
	}
}

// fakeServerStream hands the handler one request.
type fakeServerStream struct {
	grpc.ServerStream
	ctx context.Context
	req *fleetviewv1.WatchRequest
}

func (s *fakeServerStream) Context() context.Context { return s.ctx }

func (s *fakeServerStream) RecvMsg(m any) error {
	proto.Merge(m.(*fleetviewv1.WatchRequest), s.req)
	return nil
}

// TestGuardWatchVisibility: a watch, once admitted, sees the caller's
// scope (namespaces included) in its context, as a list does, so it
// judges hidden objects out before they are queued.
func TestGuardWatchVisibility(t *testing.T) {
	g := scopeGuard(t)
	info := &grpc.StreamServerInfo{FullMethod: fleetviewv1.QueryService_Watch_FullMethodName, IsServerStream: true}
	cases := []struct {
		tok     string
		nilVis  bool
		visible map[[2]string]bool
	}{
		{tok: "admin-tok", nilVis: true},
		{tok: "alice-tok", visible: map[[2]string]bool{{"member1", "x"}: true, {"member2", "x"}: false}},
		{tok: "dave-tok", visible: map[[2]string]bool{{"member9", "shop"}: true, {"member9", "kube-system"}: false}},
	}
	for _, tc := range cases {
		t.Run(tc.tok, func(t *testing.T) {
			ss := &fakeServerStream{ctx: withToken(tc.tok), req: &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"}}
			var vis *query.Visibility
			err := g.Stream(nil, ss, info, func(_ any, s grpc.ServerStream) error {
				if err := s.RecvMsg(&fleetviewv1.WatchRequest{}); err != nil {
					return err
				}
				vis = authz.VisibleFrom(s.Context())
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.nilVis != (vis == nil) {
				t.Fatalf("visibility %v, want nil=%v", vis, tc.nilVis)
			}
			for loc, want := range tc.visible {
				if got := vis.Allows(schema.GroupResource{Resource: "pods"}, loc[0], loc[1]); got != want {
					t.Errorf("%v visible=%v, want %v", loc, got, want)
				}
			}
		})
	}
}
