package authz

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestGuardCount: a count is admitted as a list of its resource: refused
// where the list would be, its clusters narrowed to the caller's, and the
// caller's visibility handed to the service (which the backend applies:
// counts cannot be filtered afterwards).
func TestGuardCount(t *testing.T) {
	g := testGuard(t)
	info := &grpc.UnaryServerInfo{FullMethod: fleetviewv1.QueryService_Count_FullMethodName}
	for _, tc := range []struct {
		name, tok string
		req       *fleetviewv1.CountRequest
		code      codes.Code
		clusters  string
		// visible: the visibility handed to the service ("" none: everything).
		visible string
	}{
		{"admin counts everything", "admin-tok", &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", By: []string{"cluster"}}, codes.OK, "", ""},
		{"alice narrowed to member1", "alice-tok", &fleetviewv1.CountRequest{Version: "v1", Resource: "pods"}, codes.OK, "member1", "visible:*-@member1/"},
		{"alice asks for member2", "alice-tok", &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", Clusters: []string{"member2"}}, codes.PermissionDenied, "", ""},
		{"alice counts deployments", "alice-tok", &fleetviewv1.CountRequest{Group: "apps", Version: "v1", Resource: "deployments"}, codes.PermissionDenied, "", ""},
		{"bob counts shop only", "bob-tok", &fleetviewv1.CountRequest{Version: "v1", Resource: "pods", By: []string{"namespace"}}, codes.OK, "", "visible:*-@/shop"},
		{"bob counts secrets", "bob-tok", &fleetviewv1.CountRequest{Version: "v1", Resource: "secrets"}, codes.PermissionDenied, "", ""},
		{"no token", "", &fleetviewv1.CountRequest{Version: "v1", Resource: "pods"}, codes.Unauthenticated, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen *fleetviewv1.CountRequest
			var vis string
			h := func(ctx context.Context, req any) (any, error) {
				seen = req.(*fleetviewv1.CountRequest)
				vis = VisibleFrom(ctx).String()
				return &fleetviewv1.CountResponse{}, nil
			}
			ctx := context.Background()
			if tc.tok != "" {
				ctx = withToken(tc.tok)
			}
			_, err := g.Unary(ctx, tc.req, info, h)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if seen != nil {
					t.Fatal("a refused count reached the service")
				}
				return
			}
			if got := strings.Join(seen.GetClusters(), ","); got != tc.clusters {
				t.Errorf("clusters %q, want %q", got, tc.clusters)
			}
			if vis != tc.visible {
				t.Errorf("visibility %q, want %q", vis, tc.visible)
			}
		})
	}
}
