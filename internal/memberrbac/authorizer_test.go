package memberrbac

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func role(ns, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
}

func rule(verbs, groups, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
}

func ss(s ...string) []string { return s }

func userSubject(n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n}
}
func groupSubject(n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: n}
}
func saSubject(ns, n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: n}
}

func crb(name, roleName string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   subjects,
	}
}

func rb(ns, name, kind, roleName string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName},
		Subjects:   subjects,
	}
}

func mustUpsert(t *testing.T, a *Authorizer, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := a.Upsert(o); err != nil {
			t.Fatal(err)
		}
	}
}

// population is a small member: every feature the evaluation has, once.
func population() []any {
	return []any{
		clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods"))),
		clusterRole("everything", rule(ss("*"), ss("*"), ss("*"))),
		clusterRole("deploy-scaler", rule(ss("get", "update"), ss("apps"), ss("deployments/scale"))),
		clusterRole("any-status", rule(ss("get"), ss("*"), ss("*/status"))),
		clusterRole("one-secret", rule(ss("get"), ss(""), ss("secrets"), "db-password")),
		clusterRole("log-reader", rule(ss("get"), ss(""), ss("pods/log"))),
		// aggregated: its rules are what the member's controller wrote
		&rbacv1.ClusterRole{
			ObjectMeta:      metav1.ObjectMeta{Name: "aggregated"},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"agg": "true"}}}},
			Rules:           []rbacv1.PolicyRule{rule(ss("list"), ss("batch"), ss("jobs"))},
		},
		role("shop", "cm-editor", rule(ss("get", "update"), ss(""), ss("configmaps"))),
		crb("admins", "everything", groupSubject("admins")),
		crb("readers", "pod-reader", userSubject("reader")),
		crb("status-all", "any-status", saSubject("kube-system", "monitor")),
		crb("agg", "aggregated", groupSubject("batchers")),
		crb("dangling", "no-such-role", userSubject("dangler")),
		rb("shop", "alice-cm", "Role", "cm-editor", userSubject("alice")),
		rb("shop", "alice-pods", "ClusterRole", "pod-reader", userSubject("alice")),
		rb("shop", "scalers", "ClusterRole", "deploy-scaler", groupSubject("devs")),
		rb("shop", "secret", "ClusterRole", "one-secret", userSubject("bob")),
		rb("shop", "local-sa", "ClusterRole", "log-reader", saSubject("", "builder")), // namespace defaults to the binding's
		rb("shop", "all-sas", "ClusterRole", "pod-reader", groupSubject("system:serviceaccounts:ci")),
		rb("web", "authenticated", "ClusterRole", "pod-reader", groupSubject("system:authenticated")),
	}
}

func TestAuthorize(t *testing.T) {
	a := New()
	mustUpsert(t, a, population()...)
	alice := Authenticated(Identity{User: "alice"})
	bob := Authenticated(Identity{User: "bob"})
	dev := Authenticated(Identity{User: "carol", Groups: []string{"devs"}})
	for _, tc := range []struct {
		name string
		id   Identity
		req  Request
		want bool
	}{
		{"masters may do anything", Identity{User: "root", Groups: []string{"system:masters"}}, Request{Verb: "delete", Resource: "nodes"}, true},
		{"nobody: nothing", Identity{User: "nobody"}, Request{Verb: "get", Resource: "pods", Namespace: "shop"}, false},
		{"group wildcard", Identity{User: "x", Groups: []string{"admins"}}, Request{Verb: "escalate", APIGroup: "rbac.authorization.k8s.io", Resource: "clusterroles"}, true},
		{"wildcard covers subresources", Identity{User: "x", Groups: []string{"admins"}}, Request{Verb: "get", Resource: "pods", Subresource: "exec", Namespace: "a"}, true},
		{"crb: cluster-wide list", Identity{User: "reader"}, Request{Verb: "list", Resource: "pods"}, true},
		{"crb: any namespace", Identity{User: "reader"}, Request{Verb: "get", Resource: "pods", Namespace: "zzz", Name: "p"}, true},
		{"crb: verb not granted", Identity{User: "reader"}, Request{Verb: "delete", Resource: "pods", Namespace: "zzz"}, false},
		{"crb: resource without subresource", Identity{User: "reader"}, Request{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "zzz"}, false},
		{"crb: other group", Identity{User: "reader"}, Request{Verb: "list", APIGroup: "apps", Resource: "pods"}, false},
		{"role binding in its namespace", alice, Request{Verb: "update", Resource: "configmaps", Namespace: "shop", Name: "c"}, true},
		{"role binding not elsewhere", alice, Request{Verb: "update", Resource: "configmaps", Namespace: "web", Name: "c"}, false},
		{"role binding not cluster-wide", alice, Request{Verb: "list", Resource: "configmaps"}, false},
		{"cluster role bound by role binding", alice, Request{Verb: "list", Resource: "pods", Namespace: "shop"}, true},
		{"cluster role bound by role binding: not cluster-wide", alice, Request{Verb: "list", Resource: "pods"}, false},
		{"subresource granted", dev, Request{Verb: "update", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "shop", Name: "d"}, true},
		{"subresource only", dev, Request{Verb: "update", APIGroup: "apps", Resource: "deployments", Namespace: "shop", Name: "d"}, false},
		{"*/status", ServiceAccount("kube-system", "monitor"), Request{Verb: "get", APIGroup: "apps", Resource: "deployments", Subresource: "status", Namespace: "x", Name: "d"}, true},
		{"*/status is not the object", ServiceAccount("kube-system", "monitor"), Request{Verb: "get", APIGroup: "apps", Resource: "deployments", Namespace: "x", Name: "d"}, false},
		{"sa of another namespace", ServiceAccount("default", "monitor"), Request{Verb: "get", Resource: "pods", Subresource: "status", Namespace: "x", Name: "p"}, false},
		{"resourceNames: named", bob, Request{Verb: "get", Resource: "secrets", Namespace: "shop", Name: "db-password"}, true},
		{"resourceNames: other name", bob, Request{Verb: "get", Resource: "secrets", Namespace: "shop", Name: "other"}, false},
		{"resourceNames: no list", bob, Request{Verb: "get", Resource: "secrets", Namespace: "shop"}, false},
		{"sa subject without namespace: binding's", ServiceAccount("shop", "builder"), Request{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "shop", Name: "p"}, true},
		{"sa subject without namespace: not another's", ServiceAccount("web", "builder"), Request{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "shop", Name: "p"}, false},
		{"implicit group system:serviceaccounts:<ns>", ServiceAccount("ci", "runner"), Request{Verb: "watch", Resource: "pods", Namespace: "shop"}, true},
		{"the same user without its implicit groups", Identity{User: "system:serviceaccount:ci:runner"}, Request{Verb: "watch", Resource: "pods", Namespace: "shop"}, false},
		{"implicit system:authenticated", Authenticated(Identity{User: "anyone"}), Request{Verb: "get", Resource: "pods", Namespace: "web", Name: "p"}, true},
		{"anonymous is not authenticated", Authenticated(Identity{User: "system:anonymous"}), Request{Verb: "get", Resource: "pods", Namespace: "web", Name: "p"}, false},
		{"aggregated rules as written", Identity{User: "x", Groups: []string{"batchers"}}, Request{Verb: "list", APIGroup: "batch", Resource: "jobs"}, true},
		{"binding to a missing role", Identity{User: "dangler"}, Request{Verb: "get", Resource: "pods", Namespace: "shop"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := a.Authorize(context.Background(), tc.id, tc.req)
			if got != tc.want {
				t.Fatalf("Authorize(%+v, %+v) = %v (%s), want %v", tc.id, tc.req, got, reason, tc.want)
			}
		})
	}
}

func TestAuthorizeReason(t *testing.T) {
	a := New()
	mustUpsert(t, a, population()...)
	_, reason := a.Authorize(context.Background(), Identity{User: "reader"}, Request{Verb: "list", Resource: "pods"})
	if want := `RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" to User "reader"`; reason != want {
		t.Fatalf("reason %q, want %q", reason, want)
	}
	_, reason = a.Authorize(context.Background(), Identity{User: "dangler"}, Request{Verb: "get", Resource: "pods"})
	if reason == "" {
		t.Fatal("a binding to a missing ClusterRole: want the resolution error as reason")
	}
}

func TestIdentities(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  Identity
		want Identity
	}{
		{"user", Authenticated(Identity{User: "alice", Groups: []string{"devs"}}), Identity{User: "alice", Groups: []string{"devs", "system:authenticated"}}},
		{"already authenticated", Authenticated(Identity{User: "alice", Groups: []string{"system:authenticated"}}), Identity{User: "alice", Groups: []string{"system:authenticated"}}},
		{"unauthenticated stays", Authenticated(Identity{User: "x", Groups: []string{"system:unauthenticated"}}), Identity{User: "x", Groups: []string{"system:unauthenticated"}}},
		{"anonymous", Authenticated(Identity{User: "system:anonymous"}), Identity{User: "system:anonymous"}},
		{"service account", ServiceAccount("ci", "runner"), Identity{User: "system:serviceaccount:ci:runner", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got.User != tc.want.User || !slices.Equal(tc.got.Groups, tc.want.Groups) {
				t.Fatalf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

func TestUpsertDelete(t *testing.T) {
	ctx := context.Background()
	alice := Identity{User: "alice"}
	listPods := Request{Verb: "list", Resource: "pods", Namespace: "shop"}
	for _, tc := range []struct {
		name  string
		steps func(t *testing.T, a *Authorizer)
		want  bool
		count Counts
	}{
		{"binding before its role", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, rb("shop", "b", "Role", "r", userSubject("alice")), role("shop", "r", rule(ss("list"), ss(""), ss("pods"))))
		}, true, Counts{Roles: 1, RoleBindings: 1}},
		{"role deleted", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, rb("shop", "b", "Role", "r", userSubject("alice")), role("shop", "r", rule(ss("list"), ss(""), ss("pods"))))
			if err := a.Delete(role("shop", "r")); err != nil {
				t.Fatal(err)
			}
		}, false, Counts{RoleBindings: 1}},
		{"binding deleted", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, rb("shop", "b", "Role", "r", userSubject("alice")), role("shop", "r", rule(ss("list"), ss(""), ss("pods"))))
			if err := a.Delete(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "b"}}); err != nil {
				t.Fatal(err)
			}
		}, false, Counts{Roles: 1}},
		{"binding's subjects replaced", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, clusterRole("r", rule(ss("list"), ss(""), ss("pods"))), crb("b", "r", userSubject("alice")), crb("b", "r", userSubject("bob")))
		}, false, Counts{ClusterRoles: 1, ClusterRoleBindings: 1}},
		{"role's rules replaced", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, crb("b", "r", userSubject("alice")), clusterRole("r", rule(ss("get"), ss(""), ss("pods"))), clusterRole("r", rule(ss("list"), ss(""), ss("pods"))))
		}, true, Counts{ClusterRoles: 1, ClusterRoleBindings: 1}},
		{"delete of the first of three keeps the others", func(t *testing.T, a *Authorizer) {
			mustUpsert(t, a, clusterRole("r", rule(ss("list"), ss(""), ss("pods"))),
				crb("b1", "r", userSubject("bob")), crb("b2", "r", userSubject("carol")), crb("b3", "r", userSubject("alice")))
			if err := a.Delete(crb("b1", "")); err != nil {
				t.Fatal(err)
			}
			mustUpsert(t, a, crb("b2", "r", userSubject("dave"))) // b3 moved into b1's slot: b2 is still found by name
			if err := a.Delete(crb("b2", "")); err != nil {
				t.Fatal(err)
			}
		}, true, Counts{ClusterRoles: 1, ClusterRoleBindings: 1}},
		{"deleting what is not there", func(t *testing.T, a *Authorizer) {
			for _, o := range []any{clusterRole("x"), role("ns", "x"), crb("x", ""), rb("ns", "x", "Role", "")} {
				if err := a.Delete(o); err != nil {
					t.Fatal(err)
				}
			}
		}, false, Counts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			tc.steps(t, a)
			if got, reason := a.Authorize(ctx, alice, listPods); got != tc.want {
				t.Fatalf("allowed %v (%s), want %v", got, reason, tc.want)
			}
			if got := a.Counts(); got != tc.count {
				t.Fatalf("counts %+v, want %+v", got, tc.count)
			}
		})
	}
}

func TestUpsertErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  any
		want error
	}{
		{"not rbac", &metav1.Status{}, ErrUnsupportedObject},
		{"nil", nil, ErrUnsupportedObject},
		{"value, not pointer", rbacv1.Role{}, ErrUnsupportedObject},
		{"cluster role without name", clusterRole(""), ErrInvalidObject},
		{"role without namespace", role("", "r"), ErrInvalidObject},
		{"role binding without name", rb("ns", "", "Role", "r"), ErrInvalidObject},
		{"cluster role binding without name", crb("", "r"), ErrInvalidObject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			if err := a.Upsert(tc.obj); !errors.Is(err, tc.want) {
				t.Fatalf("Upsert: %v, want %v", err, tc.want)
			}
			if err := a.Delete(tc.obj); !errors.Is(err, tc.want) {
				t.Fatalf("Delete: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	var m Members
	if _, ok := m.Lookup("a"); ok {
		t.Fatal("empty Members holds a")
	}
	a := m.Cluster("a")
	if m.Cluster("a") != a {
		t.Fatal("Cluster made a second Authorizer for a")
	}
	mustUpsert(t, a, clusterRole("r", rule(ss("list"), ss(""), ss("pods"))), crb("b", "r", userSubject("alice")))
	b := m.Cluster("b")
	req := Request{Verb: "list", Resource: "pods"}
	if ok, _ := a.Authorize(context.Background(), Identity{User: "alice"}, req); !ok {
		t.Fatal("a: alice may list pods")
	}
	if ok, _ := b.Authorize(context.Background(), Identity{User: "alice"}, req); ok {
		t.Fatal("b: alice may not list pods")
	}
	if got := m.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names %v", got)
	}
	m.Remove("a")
	if _, ok := m.Lookup("a"); ok {
		t.Fatal("a still held after Remove")
	}
}

// TestConcurrentChanges decides while bindings change (run with -race): a
// decision sees the objects before or after a change, never a torn list.
func TestConcurrentChanges(t *testing.T) {
	a := New()
	mustUpsert(t, a, clusterRole("r", rule(ss("list"), ss(""), ss("pods"))), crb("keep", "r", userSubject("alice")))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			b := rb("ns", fmt.Sprint("b", i%7), "ClusterRole", "r", userSubject("bob"))
			c := crb(fmt.Sprint("c", i%5), "r", userSubject("bob"))
			if i%3 == 0 {
				_ = a.Delete(b)
				_ = a.Delete(c)
			} else if err := errors.Join(a.Upsert(b), a.Upsert(c)); err != nil {
				t.Error(err) // not Fatal: another goroutine
				return
			}
		}
	}()
	ctx := context.Background()
	for {
		select {
		case <-done:
			return
		default:
		}
		if ok, _ := a.Authorize(ctx, Identity{User: "alice"}, Request{Verb: "list", Resource: "pods", Namespace: "ns"}); !ok {
			t.Fatal("alice lost access while others' bindings changed")
		}
		if s := a.Scope(ctx, Identity{User: "alice"}, "list", Resource{Resource: "pods"}); !s.All {
			t.Fatalf("alice's scope %+v while others' bindings changed", s)
		}
	}
}
