package memberrbac

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	cases := []struct {
		name, resource, json string
		want                 string // "" decodes; else a word the error names
	}{
		{"cluster role", "clusterroles", `{"kind":"ClusterRole","metadata":{"name":"system:aggregate-to-view"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]}`, ""},
		{"role binding", "rolebindings", `{"metadata":{"name":"a","namespace":"shop"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"},"subjects":[{"kind":"User","name":"alice"}]}`, ""},
		{"not JSON", "roles", `{"metadata":`, "Role"},
		{"data after the object", "roles", `{"metadata":{"name":"a","namespace":"x"}} {}`, "data after"},
		{"wrong kind", "roles", `{"kind":"ClusterRole","metadata":{"name":"a","namespace":"x"}}`, `kind "ClusterRole"`},
		{"no name", "clusterroles", `{"metadata":{}}`, "metadata.name"},
		{"a slash in the name", "clusterroles", `{"metadata":{"name":"a/b"}}`, "metadata.name"},
		{"role without namespace", "roles", `{"metadata":{"name":"a"}}`, "metadata.namespace"},
		{"invalid namespace", "rolebindings", `{"metadata":{"name":"a","namespace":"Not_A_Label"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"}}`, "metadata.namespace"},
		{"namespaced cluster role", "clusterroles", `{"metadata":{"name":"a","namespace":"x"}}`, "cluster-scoped"},
		{"roleRef of another group", "rolebindings", `{"metadata":{"name":"a","namespace":"x"},"roleRef":{"apiGroup":"evil.io","kind":"Role","name":"r"}}`, "roleRef.apiGroup"},
		{"cluster binding to a Role", "clusterrolebindings", `{"metadata":{"name":"a"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"}}`, "roleRef.kind"},
		{"roleRef without name", "clusterrolebindings", `{"metadata":{"name":"a"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole"}}`, "roleRef.name"},
		{"rules of the wrong type", "clusterroles", `{"metadata":{"name":"a"},"rules":"all"}`, "ClusterRole"},
		{"not an RBAC resource", "pods", `{}`, "pods"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := Decode(tc.resource, []byte(tc.json))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := New().Upsert(obj); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidObject) && !errors.Is(err, ErrUnsupportedObject) {
				t.Fatalf("%v is not a sentinel", err)
			}
		})
	}
	t.Run("a tombstone deletes by name", func(t *testing.T) {
		a := New()
		mustUpsert(t, a, rb("shop", "x", "ClusterRole", "r", userSubject("alice")))
		obj, err := DecodeDeleted("rolebindings", []byte(`{"kind":"RoleBinding","metadata":{"name":"x","namespace":"shop"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(obj); err != nil {
			t.Fatal(err)
		}
		if n := a.Counts().RoleBindings; n != 0 {
			t.Fatalf("%d role bindings left", n)
		}
		if _, err := DecodeDeleted("rolebindings", []byte(`{"metadata":{"name":"x"}}`)); err == nil {
			t.Fatal("a RoleBinding tombstone without a namespace was taken")
		}
	})
}

func TestMembersReach(t *testing.T) {
	ctx := context.Background()
	m := &Members{}
	reader := clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods")))
	alice := Authenticated(Identity{User: "alice"})
	pods := Resource{Resource: "pods"}
	for _, c := range []string{"c1", "c2", "c3"} {
		if err := m.Upsert(c, reader); err != nil {
			t.Fatal(err)
		}
		if err := m.Upsert(c, rb("shop", "alice", "ClusterRole", "pod-reader", userSubject("alice"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Upsert("c3", crb("all", "pod-reader", groupSubject("system:authenticated"))); err != nil {
		t.Fatal(err)
	}
	r := m.Reach(ctx, alice, "list", pods)
	if len(r.Groups) != 2 || strings.Join(r.Groups[0].Clusters, ",") != "c1,c2" || !r.Groups[1].Scope.All {
		t.Fatalf("reach %+v: want c1,c2 alike and c3 everywhere", r)
	}
	if !r.Allows("c1", "shop") || r.Allows("c1", "payments") || !r.Allows("c3", "payments") || r.Allows("c4", "shop") {
		t.Fatalf("reach %+v allows the wrong places", r)
	}
	gen, changed := m.Changed()
	del, _ := Named("rolebindings", "shop", "alice")
	if err := m.Delete("c2", del); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a change was not announced")
	}
	if m.Generation() != gen+1 {
		t.Fatalf("generation %d after %d", m.Generation(), gen)
	}
	after := m.Reach(ctx, alice, "list", pods)
	if after.Allows("c2", "shop") || after.Covers(r) || !r.Covers(after) {
		t.Fatalf("reach after the delete %+v: remembered across a change", after)
	}
	if !m.Reach(ctx, Identity{User: "root", Groups: ss("system:masters")}, "list", pods).Masters {
		t.Fatal("system:masters is not everywhere")
	}
	if !m.Reach(ctx, Authenticated(Identity{User: "bob"}), "list", Resource{Resource: "secrets"}).None() {
		t.Fatal("bob reaches secrets")
	}
}
