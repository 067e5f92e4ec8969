package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const policyYAML = `
rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*", secrets]
- groups: [registry-admins]
  verbs: [registry-admin]
  resources: [registries]
- users: [alice]
  verbs: [get, list, watch]
  resources: [pods, deployments.apps]
  clusters: [member1]
- users: [bob]
  verbs: [list]
  resources: ["*"]
  namespaces: [shop]
- users: [carol]
  verbs: [get]
  resources: [pods]
  clusters: [member2]
  namespaces: [payments]
`

func policy(t *testing.T) *Authorizer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	return NewAuthorizer(p)
}

func TestAuthorize(t *testing.T) {
	a := policy(t)
	admin := User{Name: "root", Groups: []string{"fleet-admins"}}
	regAdmin := User{Name: "ops", Groups: []string{"registry-admins"}}
	alice, bob, carol, eve := User{Name: "alice"}, User{Name: "bob"}, User{Name: "carol"}, User{Name: "eve"}
	cases := []struct {
		u                      User
		verb, res, cluster, ns string
		ok                     bool
	}{
		{admin, VerbList, "secrets", "", "", true},
		{admin, VerbRegistryAdmin, "registries", "", "", false}, // "*" never grants registry writes
		{admin, VerbList, "registries", "", "", true},
		{regAdmin, VerbRegistryAdmin, "registries", "", "", true},
		{regAdmin, VerbList, "pods", "", "", false},
		{alice, VerbList, "pods", "member1", "", true},
		{alice, VerbList, "pods", "", "", false}, // all clusters, but alice is limited to member1
		{alice, VerbList, "pods", "member2", "", false},
		{alice, VerbGet, "deployments.apps", "member1", "shop", true},
		{alice, VerbGet, "services", "member1", "shop", false},
		{alice, VerbSearch, "pods", "member1", "", false},
		{bob, VerbList, "pods", "member3", "shop", true},
		{bob, VerbList, "pods", "member3", "", false}, // all namespaces
		{bob, VerbList, "secrets", "member3", "shop", false},
		{bob, VerbGet, "pods", "member3", "shop", false},
		{carol, VerbGet, "pods", "member2", "payments", true},
		{carol, VerbGet, "pods", "member1", "payments", false},
		{carol, VerbGet, "pods", "member2", "shop", false},
		{eve, VerbGet, "pods", "member1", "shop", false},
	}
	for _, tc := range cases {
		err := a.Authorize(tc.u, tc.verb, tc.res, tc.cluster, tc.ns)
		if tc.ok != (err == nil) {
			t.Errorf("%s %s %s in %q/%q: got %v, want allowed=%v", tc.u.Name, tc.verb, tc.res, tc.cluster, tc.ns, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrForbidden) {
			t.Errorf("error %v is not ErrForbidden", err)
		}
	}
}

func TestScopePushdown(t *testing.T) {
	a := policy(t)
	s := a.Scope(User{Name: "alice"}, VerbList, "pods")
	if cl, all := s.Clusters(); all || strings.Join(cl, ",") != "member1" {
		t.Fatalf("alice clusters = %v all=%v", cl, all)
	}
	if !s.Allows("member1", "anything") || s.Allows("member2", "shop") {
		t.Fatal("alice scope wrong")
	}
	s = a.Scope(User{Name: "bob"}, VerbList, "pods")
	if _, all := s.Clusters(); !all || !s.Allows("member9", "shop") || s.Allows("member9", "payments") || s.Unrestricted() {
		t.Fatal("bob scope wrong")
	}
	if s := a.Scope(User{Name: "bob"}, VerbList, "secrets"); !s.Empty() {
		t.Fatal("a '*' rule must not reach secrets")
	}
	if s := a.Scope(User{Name: "x", Groups: []string{"fleet-admins"}}, VerbList, "secrets"); !s.Unrestricted() {
		t.Fatal("admins name secrets explicitly and see them")
	}
}

func TestPolicyValidation(t *testing.T) {
	p := &Policy{Rules: []Rule{{Verbs: []string{"delete", "admin"}}}}
	err := p.Validate()
	for _, want := range []string{"rules[0]: users or groups", `rules[0].verbs[0]: unknown verb "delete"`, "rules[0].resources",
		`"*" means get, list, watch, search, never registry-admin, which a rule must name`,
		`rules[0].verbs[1]: unknown verb "admin"`, "registry writes need the verb registry-admin"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want mention of %q", err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	_ = os.WriteFile(path, []byte("rules:\n- users: [a]\n  verbs: [get]\n  resources: [pods]\n  colour: red\n"), 0o600)
	if _, err := LoadPolicy(path); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestTokens(t *testing.T) {
	ta, err := LoadTokens(strings.NewReader("# comment\ns3cret,alice,1,\"dev,ops\"\nt2,bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := ta.Authenticate("s3cret")
	if err != nil || u.Name != "alice" || strings.Join(u.Groups, ",") != "dev,ops" {
		t.Fatalf("alice: %+v %v", u, err)
	}
	if u, err := ta.Authenticate("t2"); err != nil || u.Name != "bob" {
		t.Fatalf("bob: %+v %v", u, err)
	}
	if _, err := ta.Authenticate("nope"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown token: %v", err)
	}
	if _, err := LoadTokens(strings.NewReader(",nobody\n")); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("empty token accepted: %v", err)
	}
	c := &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"ops"}}}
	if u := UserFromCertificate(c); u.Name != "carol" || u.Groups[0] != "ops" {
		t.Fatalf("cert user %+v", u)
	}
}

func TestScopeSortedPairs(t *testing.T) {
	s := Scope{Pairs: []ClusterNamespaces{{Clusters: []string{"a", "c", "e"}, Namespaces: []string{"shop", "x"}, Sorted: true}}}
	for _, tc := range []struct {
		cluster, ns string
		want        bool
	}{{"c", "shop", true}, {"e", "x", true}, {"b", "shop", false}, {"a", "payments", false}, {"f", "x", false}} {
		if got := s.Allows(tc.cluster, tc.ns); got != tc.want {
			t.Fatalf("Allows(%q, %q) = %v, want %v", tc.cluster, tc.ns, got, tc.want)
		}
	}
}
