package queryapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// recvStream is a server stream whose one request is req.
type recvStream struct {
	grpc.ServerStream
	ctx context.Context
	req *fleetviewv1.WatchRequest
}

func (s *recvStream) Context() context.Context { return s.ctx }

func (s *recvStream) RecvMsg(m any) error {
	proto.Merge(m.(*fleetviewv1.WatchRequest), s.req)
	return nil
}

// A watch admitted by the Guard carries the caller's namespace scope in the
// context its selection is built from (selection reads visibleFrom), as a
// list does: what the caller may not see is left out where each event is
// judged (TestWatchJudgesEvents, TestWatchBufferHoldsVisibleEventsOnly),
// never sealed, queued or counted as sent and then dropped by the Guard.
func TestGuardedWatchScopeInSelection(t *testing.T) {
	tokens, err := auth.LoadTokens(strings.NewReader("carol-tok,carol\nadmin-tok,root,1,admins\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := &auth.Policy{Rules: []auth.Rule{
		{Groups: []string{"admins"}, Verbs: []string{"*"}, Resources: []string{"*"}},
		{Users: []string{"carol"}, Verbs: []string{"watch"}, Resources: []string{"pods"}, Clusters: []string{"member1"}, Namespaces: []string{"shop"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	g := &authz.Guard{Tokens: tokens, Authorizer: auth.NewAuthorizer(p)}
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name, token string
		allowed     map[[2]string]bool // cluster, namespace -> visible
	}{
		{"namespace-scoped caller", "carol-tok", map[[2]string]bool{
			{"member1", "shop"}: true, {"member1", "kube-system"}: false, {"member2", "shop"}: false,
		}},
		{"unrestricted caller: no visibility to apply", "admin-tok", map[[2]string]bool{
			{"member1", "shop"}: true, {"member1", "kube-system"}: true, {"member2", "shop"}: true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := &recvStream{ctx: withToken(tc.token), req: &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"}}
			var handled bool
			err := g.Stream(nil, ss, &grpc.StreamServerInfo{FullMethod: "/fleetview.v1.QueryService/Watch", IsServerStream: true}, func(_ any, s grpc.ServerStream) error {
				handled = true
				var req fleetviewv1.WatchRequest
				if err := s.RecvMsg(&req); err != nil {
					return err
				}
				vis := authz.VisibleFrom(s.Context())
				for cn, want := range tc.allowed {
					if got := vis.Allows(pods, cn[0], cn[1]); got != want {
						t.Errorf("the selection's visibility allows %s/%s: %v, want %v", cn[0], cn[1], got, want)
					}
				}
				return nil
			})
			if err != nil || !handled {
				t.Fatalf("Stream: %v (handled %v)", err, handled)
			}
		})
	}
}
