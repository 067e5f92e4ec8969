package memberrbac

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

func TestScope(t *testing.T) {
	a := New()
	mustUpsert(t, a, population()...)
	mustUpsert(t, a,
		rb("web", "alice-pods", "ClusterRole", "pod-reader", userSubject("alice")),
		rb("empty", "nobody", "ClusterRole", "pod-reader"),
		rb("later", "for-a-namespace-not-yet-there", "ClusterRole", "everything", userSubject("alice")),
	)
	alice := Authenticated(Identity{User: "alice"})
	pods := Resource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		id   Identity
		verb string
		r    Resource
		want Scope
	}{
		{"masters", Identity{User: "root", Groups: []string{"system:masters"}}, "list", pods, Scope{All: true}},
		{"cluster role binding", Identity{User: "reader"}, "list", pods, Scope{All: true}},
		{"group wildcard", Identity{User: "x", Groups: []string{"admins"}}, "watch", Resource{APIGroup: "apps", Resource: "deployments"}, Scope{All: true}},
		{"role bindings: sorted namespaces", alice, "list", pods, Scope{Namespaces: []string{"later", "shop", "web"}}},
		{"role and cluster role", alice, "get", Resource{Resource: "configmaps"}, Scope{Namespaces: []string{"later", "shop"}}},
		{"verb not granted", alice, "list", Resource{Resource: "configmaps"}, Scope{Namespaces: []string{"later"}}},
		{"resourceNames never grant a collection", Identity{User: "bob"}, "get", Resource{Resource: "secrets"}, Scope{}},
		{"system:authenticated", Authenticated(Identity{User: "zed"}), "watch", pods, Scope{Namespaces: []string{"web"}}},
		{"service account's namespace group", ServiceAccount("ci", "runner"), "list", pods, Scope{Namespaces: []string{"shop", "web"}}},
		{"subresource", Authenticated(Identity{User: "carol", Groups: []string{"devs"}}), "get", Resource{APIGroup: "apps", Resource: "deployments", Subresource: "scale"}, Scope{Namespaces: []string{"shop"}}},
		{"nothing", Identity{User: "nobody"}, "list", pods, Scope{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := a.Scope(context.Background(), tc.id, tc.verb, tc.r)
			if got.All != tc.want.All || !slices.Equal(got.Namespaces, tc.want.Namespaces) {
				t.Fatalf("Scope = %+v, want %+v", got, tc.want)
			}
			if got.None() != (!tc.want.All && len(tc.want.Namespaces) == 0) {
				t.Fatalf("None() = %v for %+v", got.None(), got)
			}
			// Allows agrees with Authorize in every namespace there is and one there is not.
			for _, ns := range []string{"", "shop", "web", "later", "empty", "kube-system", "nowhere"} {
				want, _ := a.Authorize(context.Background(), tc.id, Request{Verb: tc.verb, APIGroup: tc.r.APIGroup, Resource: tc.r.Resource, Subresource: tc.r.Subresource, Namespace: ns})
				if got.Allows(ns) != want {
					t.Errorf("Allows(%q) = %v, Authorize says %v", ns, got.Allows(ns), want)
				}
			}
		})
	}
}

// TestRandomAgainstUpstream applies random upserts and deletes, then checks
// every decision against upstream's RBACAuthorizer built from scratch over
// the final objects (upstream's StaticRoles), and every Scope against
// Authorize: the incremental store must be indistinguishable from the
// member's.
func TestRandomAgainstUpstream(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { randomRound(t, seed) })
	}
}

func randomRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	some := func(s []string) []string {
		n := 1 + rng.IntN(2)
		out := make([]string, n)
		for i := range out {
			out[i] = pick(s)
		}
		return out
	}
	namespaces := []string{"a", "b", "c", "d"}
	verbs := []string{"get", "list", "watch", "update", "*"}
	groups := []string{"", "apps", "*"}
	resources := []string{"pods", "deployments", "pods/log", "deployments/scale", "*", "*/status", "secrets"}
	users := []string{"u1", "u2", "u3", "system:serviceaccount:a:sa", "system:serviceaccount:b:sa"}
	grps := []string{"g1", "g2", "system:serviceaccounts", "system:serviceaccounts:a", "system:authenticated"}
	names := []string{"r1", "r2", "r3"}
	randRules := func() []rbacv1.PolicyRule {
		out := make([]rbacv1.PolicyRule, 1+rng.IntN(2))
		for i := range out {
			out[i] = rule(some(verbs), some(groups), some(resources))
			if rng.IntN(4) == 0 {
				out[i].ResourceNames = []string{pick([]string{"x", "y"})}
			}
		}
		return out
	}
	randSubjects := func() []rbacv1.Subject {
		out := make([]rbacv1.Subject, 1+rng.IntN(2))
		for i := range out {
			switch rng.IntN(3) {
			case 0:
				out[i] = userSubject(pick(users))
			case 1:
				out[i] = groupSubject(pick(grps))
			default:
				ns := pick(append(namespaces, "")) // "" in a RoleBinding: the binding's namespace
				out[i] = saSubject(ns, "sa")
			}
		}
		return out
	}

	a := New()
	type key struct{ kind, ns, name string }
	final := map[key]any{}
	for range 300 {
		ns, name := pick(namespaces), pick(names)
		var k key
		var obj any
		switch rng.IntN(4) {
		case 0:
			k, obj = key{"cr", "", name}, clusterRole(name, randRules()...)
		case 1:
			k, obj = key{"role", ns, name}, role(ns, name, randRules()...)
		case 2:
			k, obj = key{"crb", "", name}, crb(name, pick(names), randSubjects()...)
		default:
			kind := pick([]string{"Role", "ClusterRole"})
			k, obj = key{"rb", ns, name}, rb(ns, name, kind, pick(names), randSubjects()...)
		}
		if rng.IntN(4) == 0 {
			if err := a.Delete(obj); err != nil {
				t.Fatal(err)
			}
			delete(final, k)
			continue
		}
		if err := a.Upsert(obj); err != nil {
			t.Fatal(err)
		}
		final[k] = obj
	}

	var (
		roles []*rbacv1.Role
		rbs   []*rbacv1.RoleBinding
		crs   []*rbacv1.ClusterRole
		crbs  []*rbacv1.ClusterRoleBinding
	)
	for _, o := range final {
		switch o := o.(type) {
		case *rbacv1.Role:
			roles = append(roles, o)
		case *rbacv1.RoleBinding:
			rbs = append(rbs, o)
		case *rbacv1.ClusterRole:
			crs = append(crs, o)
		case *rbacv1.ClusterRoleBinding:
			crbs = append(crbs, o)
		}
	}
	_, static := validation.NewTestRuleResolver(roles, rbs, crs, crbs)
	ref := rbac.New(static, static, static, static)
	if got, want := a.Counts(), (Counts{ClusterRoles: len(crs), ClusterRoleBindings: len(crbs), Roles: len(roles), RoleBindings: len(rbs)}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}

	ctx := context.Background()
	allowed := 0
	for range 2000 {
		id := Identity{User: pick(users), Groups: some(grps)}
		res := pick([]string{"pods", "deployments", "secrets", "configmaps"})
		req := Request{Verb: pick([]string{"get", "list", "watch", "update", "delete"}), APIGroup: pick([]string{"", "apps"}), Resource: res,
			Namespace: pick(append(namespaces, "", "e")), Name: pick([]string{"", "x", "z"})}
		if rng.IntN(3) == 0 {
			req.Subresource = pick([]string{"log", "scale", "status"})
		}
		got, _ := a.Authorize(ctx, id, req)
		d, _, _ := ref.Authorize(ctx, authorizer.AttributesRecord{User: id.info(), Verb: req.Verb, Namespace: req.Namespace, APIGroup: req.APIGroup,
			Resource: req.Resource, Subresource: req.Subresource, Name: req.Name, ResourceRequest: true})
		if want := d == authorizer.DecisionAllow; got != want {
			t.Fatalf("%+v %+v: got %v, upstream %v", id, req, got, want)
		}
		if got {
			allowed++
		}
		sc := a.Scope(ctx, id, req.Verb, Resource{APIGroup: req.APIGroup, Resource: req.Resource, Subresource: req.Subresource})
		for _, ns := range append(namespaces, "", "e") {
			want, _ := a.Authorize(ctx, id, Request{Verb: req.Verb, APIGroup: req.APIGroup, Resource: req.Resource, Subresource: req.Subresource, Namespace: ns})
			if sc.Allows(ns) != want {
				t.Fatalf("%+v %+v: Scope %+v Allows(%q) = %v, Authorize %v", id, req, sc, ns, sc.Allows(ns), want)
			}
		}
	}
	t.Logf("2000 decisions, %d allowed; %d objects", allowed, len(final))
}
