package queryapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
)

// TestActCaller: who the hub lets a forwarded request reach a member as.
func TestActCaller(t *testing.T) {
	tokens, err := auth.LoadTokens(strings.NewReader("alice-token,alice,1,\"devs,ops\"\nbob-token,bob,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	authz := auth.NewAuthorizer(&auth.Policy{Rules: []auth.Rule{
		{Users: []string{"alice"}, Verbs: []string{"*"}, Resources: []string{"pods"}, Clusters: []string{"member1"}, Namespaces: []string{"shop"}},
	}})
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name, token, cluster, ns string
		gr                       schema.GroupResource
		mode                     AuthorizationMode
		code                     codes.Code
	}{
		{"alice in her scope", "alice-token", "member1", "shop", pods, ModePolicy, codes.OK},
		{"alice's discovery of member1", "alice-token", "member1", "", schema.GroupResource{}, ModePolicy, codes.OK},
		{"alice outside her namespace", "alice-token", "member1", "prod", pods, ModePolicy, codes.PermissionDenied},
		{"alice outside her clusters", "alice-token", "member2", "shop", pods, ModePolicy, codes.PermissionDenied},
		{"alice's discovery of member2", "alice-token", "member2", "", schema.GroupResource{}, ModePolicy, codes.PermissionDenied},
		{"bob, no rule", "bob-token", "member1", "shop", pods, ModePolicy, codes.PermissionDenied},
		{"bob under member RBAC: the member decides", "bob-token", "member1", "shop", pods, ModeMemberRBAC, codes.OK},
		{"bob under both", "bob-token", "member1", "shop", pods, ModeBoth, codes.PermissionDenied},
		{"no token", "", "member1", "shop", pods, ModePolicy, codes.Unauthenticated},
		{"a forged token", "forged", "member1", "shop", pods, ModeMemberRBAC, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Guard{Tokens: tokens, Authorizer: authz, Mode: tc.mode}
			r := httptest.NewRequest("PATCH", "/clusters/"+tc.cluster+"/api/v1/namespaces/"+tc.ns+"/pods/web", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			caller, err := g.actCaller(r, tc.cluster, tc.ns, tc.gr)
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if err == nil && (caller.User == "" || (tc.token == "alice-token" && strings.Join(caller.Groups, ",") != "devs,ops")) {
				t.Errorf("caller %+v", caller)
			}
		})
	}
	if _, err := noActCaller(httptest.NewRequest("GET", "/", nil), "member1", "", schema.GroupResource{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without authentication: %v", err)
	}
}
