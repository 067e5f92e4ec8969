package authz

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/relay"
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
			caller, err := g.ActCaller(r, tc.cluster, tc.ns, tc.gr)
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if err == nil && (caller.User == "" || (tc.token == "alice-token" && strings.Join(caller.Groups, ",") != "devs,ops")) {
				t.Errorf("caller %+v", caller)
			}
		})
	}
	if _, err := NoActCaller(httptest.NewRequest("GET", "/", nil), "member1", "", schema.GroupResource{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without authentication: %v", err)
	}
}

// TestActAs: a forwarded request impersonates the caller as the member
// identity map names it in the target cluster, the very identity the
// member's mirrored RBAC decides reads for (less system:authenticated,
// which the member's impersonation adds itself); no map, no change; a
// map that cannot say (a label rule, the cluster's labels unknown) refuses
// the request as reads there are refused.
func TestActAs(t *testing.T) {
	m := &memberrbac.IdentityMap{Rules: []memberrbac.MapRule{{Clusters: []string{"member2"}, UserPrefix: "corp:", GroupPrefix: "corp:"},
		{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"idp": "lab"}}, UserPrefix: "lab:"}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	mapped := func() *memberrbac.Members {
		ms := &memberrbac.Members{Map: m}
		ms.SetLabels("member1", map[string]string{"idp": "corp"}, true)
		ms.SetLabels("member3", map[string]string{"idp": "lab"}, true)
		return ms
	}
	alice := relay.Caller{User: "alice", Groups: []string{"devs", "ops"}}
	for _, tc := range []struct {
		name    string
		g       *Guard
		cluster string
		want    relay.Caller
		code    codes.Code
	}{
		{"mapped by name", &Guard{Mode: ModeMemberRBAC, Members: mapped()}, "member2", relay.Caller{User: "corp:alice", Groups: []string{"corp:devs", "corp:ops"}}, codes.OK},
		{"mapped by labels", &Guard{Mode: ModeMemberRBAC, Members: mapped()}, "member3", relay.Caller{User: "lab:alice", Groups: []string{"devs", "ops"}}, codes.OK},
		{"cluster no rule selects", &Guard{Mode: ModeMemberRBAC, Members: mapped()}, "member1", alice, codes.OK},
		{"labels unknown: refused", &Guard{Mode: ModeBoth, Members: mapped()}, "member4", relay.Caller{}, codes.PermissionDenied},
		{"member RBAC without a map", &Guard{Mode: ModeBoth, Members: &memberrbac.Members{}}, "member2", alice, codes.OK},
		{"policy mode", &Guard{Mode: ModePolicy}, "member2", alice, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.g.ActAs(tc.cluster, alice)
			if status.Code(err) != tc.code || got.User != tc.want.User || !slices.Equal(got.Groups, tc.want.Groups) {
				t.Fatalf("ActAs = %+v, %v; want %+v, %v", got, err, tc.want, tc.code)
			}
			if tc.g.Members != nil {
				read, ok := tc.g.Members.Identity(tc.cluster, memberrbac.Identity{User: alice.User, Groups: alice.Groups})
				if ok != (err == nil) {
					t.Fatalf("reads in %s known %v, a forwarded request's error %v", tc.cluster, ok, err)
				}
				if want := memberrbac.Authenticated(memberrbac.Identity{User: got.User, Groups: got.Groups}); ok && (read.User != want.User || !slices.Equal(read.Groups, want.Groups)) {
					t.Fatalf("reads see %+v in %s, a forwarded request %+v", read, tc.cluster, got)
				}
			}
			if alice.User != "alice" || !slices.Equal(alice.Groups, []string{"devs", "ops"}) {
				t.Fatalf("the caller changed: %+v", alice)
			}
		})
	}
}

// TestActAsReservedNames: a mapping that would hand the member one of its
// own system: names is refused before the member sees the request, and
// reads in that member are decided for no one (issue #43): a group the
// rule leaves as it is (system:masters under a rule prefixing only users),
// a prefix that completes a hub name into system:masters (a map that was
// never validated: Validate refuses "system"), unless the rule lets that
// very name through (allowSystemNames).
func TestActAsReservedNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rule   memberrbac.MapRule
		caller relay.Caller
		want   relay.Caller
		code   codes.Code
	}{
		{"a system: group left as it is", memberrbac.MapRule{Clusters: []string{"member1"}, UserPrefix: "corp:"},
			relay.Caller{User: "root", Groups: []string{"devs", "system:masters"}}, relay.Caller{}, codes.PermissionDenied},
		{"a system: user left as it is", memberrbac.MapRule{Clusters: []string{"member1"}, GroupPrefix: "corp:"},
			relay.Caller{User: "system:serviceaccount:kube-system:admin"}, relay.Caller{}, codes.PermissionDenied},
		{"a prefix completing :masters", memberrbac.MapRule{Clusters: []string{"*"}, GroupPrefix: "system"},
			relay.Caller{User: "mallory", Groups: []string{":masters"}}, relay.Caller{}, codes.PermissionDenied},
		{"allowSystemNames lets the same name through", memberrbac.MapRule{Clusters: []string{"member1"}, UserPrefix: "corp:", AllowSystemNames: true},
			relay.Caller{User: "root", Groups: []string{"system:masters"}}, relay.Caller{User: "corp:root", Groups: []string{"system:masters"}}, codes.OK},
		{"allowSystemNames makes none", memberrbac.MapRule{Clusters: []string{"member1"}, GroupPrefix: "sys", AllowSystemNames: true},
			relay.Caller{User: "mallory", Groups: []string{"tem:masters"}}, relay.Caller{}, codes.PermissionDenied},
		{"a prefixed system: name is no system: name", memberrbac.MapRule{Clusters: []string{"member1"}, UserPrefix: "corp:", GroupPrefix: "corp:"},
			relay.Caller{User: "root", Groups: []string{"system:masters"}}, relay.Caller{User: "corp:root", Groups: []string{"corp:system:masters"}}, codes.OK},
		{"no rule for the cluster: the caller as authenticated", memberrbac.MapRule{Clusters: []string{"member2"}, UserPrefix: "corp:"},
			relay.Caller{User: "root", Groups: []string{"system:masters"}}, relay.Caller{User: "root", Groups: []string{"system:masters"}}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Guard{Mode: ModeMemberRBAC, Members: &memberrbac.Members{Map: &memberrbac.IdentityMap{Rules: []memberrbac.MapRule{tc.rule}}}}
			got, err := g.ActAs("member1", tc.caller)
			if status.Code(err) != tc.code || got.User != tc.want.User || !slices.Equal(got.Groups, tc.want.Groups) {
				t.Fatalf("ActAs = %+v, %v; want %+v, %v", got, err, tc.want, tc.code)
			}
			if err != nil && !strings.Contains(err.Error(), "system:") {
				t.Fatalf("the refusal does not say why: %v", err)
			}
			_, ok := g.Members.Identity("member1", memberrbac.Identity{User: tc.caller.User, Groups: tc.caller.Groups})
			if ok != (err == nil) {
				t.Fatalf("reads in member1 known %v, a forwarded request's error %v", ok, err)
			}
		})
	}
}
