package memberrbac

import (
	"context"
	"fmt"
	"testing"
)

// benchMember is a member where user u is granted pods in n namespaces
// through n RoleBindings, beside 100 ClusterRoleBindings for others.
func benchMember(b *testing.B, n int) *Authorizer {
	a := New()
	mustUpsertB(b, a, clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods"))))
	for i := range 100 {
		mustUpsertB(b, a, crb(fmt.Sprint("crb", i), "pod-reader", userSubject(fmt.Sprint("other", i))))
	}
	for i := range n {
		ns := fmt.Sprint("ns", i)
		mustUpsertB(b, a, rb(ns, "u", "ClusterRole", "pod-reader", userSubject("u")), rb(ns, "other", "ClusterRole", "pod-reader", groupSubject("g")))
	}
	return a
}

func mustUpsertB(b *testing.B, a *Authorizer, objs ...any) {
	for _, o := range objs {
		if err := a.Upsert(o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuthorize(b *testing.B) {
	a := benchMember(b, 1000)
	id := Authenticated(Identity{User: "u"})
	req := Request{Verb: "list", Resource: "pods", Namespace: "ns500"}
	for b.Loop() {
		if ok, _ := a.Authorize(context.Background(), id, req); !ok {
			b.Fatal("denied")
		}
	}
}

func BenchmarkScope(b *testing.B) {
	a := benchMember(b, 1000)
	id := Authenticated(Identity{User: "u"})
	for b.Loop() {
		if s := a.Scope(context.Background(), id, "list", Resource{Resource: "pods"}); len(s.Namespaces) != 1000 {
			b.Fatalf("%d namespaces", len(s.Namespaces))
		}
	}
}

// BenchmarkUpsertRoleBinding is the cost of one change in a member of 1,000
// namespaces with two RoleBindings each.
func BenchmarkUpsertRoleBinding(b *testing.B) {
	a := benchMember(b, 1000)
	o := rb("ns500", "u", "ClusterRole", "pod-reader", userSubject("u"))
	for b.Loop() {
		if err := a.Upsert(o); err != nil {
			b.Fatal(err)
		}
	}
}
