package queryapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// The Guard the service tests run behind: the policy of authz's own tests.

func testGuard(t *testing.T) *authz.Guard {
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
	return &authz.Guard{Tokens: tokens, Authorizer: auth.NewAuthorizer(p)}
}

func withToken(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

func raw(cluster, ns, name string) []byte {
	return []byte(`{"metadata":{"name":"` + name + `","namespace":"` + ns + `","annotations":{"fleetview.io/cluster":"` + cluster + `"}}}`)
}
