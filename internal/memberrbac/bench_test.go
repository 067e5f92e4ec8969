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

// benchMembers is the fleet: three members, each granting u pods
// in 1,000 namespaces through 1,000 RoleBindings.
func benchMembers(b *testing.B) *Members {
	m := &Members{}
	for c := range 3 {
		a := benchMember(b, 1000)
		m.mu.Lock()
		if m.m == nil {
			m.m = map[string]*Authorizer{}
		}
		m.m[fmt.Sprint("member", c)] = a
		m.mu.Unlock()
	}
	return m
}

// BenchmarkReachAfterChange is the first request after any member's RBAC
// changed: every member's Scope is decided again.
func BenchmarkReachAfterChange(b *testing.B) {
	m := benchMembers(b)
	caller := Identity{User: "u"}
	for b.Loop() {
		m.bump()
		if r := m.Reach(context.Background(), caller, "list", Resource{Resource: "pods"}); len(r.Groups) != 1 || len(r.Groups[0].Clusters) != 3 {
			b.Fatalf("reach %+v", r)
		}
	}
}

// BenchmarkReachOneMemberChanged is the first request after one member's
// RBAC changed: that member decides again, the others answer from memory.
func BenchmarkReachOneMemberChanged(b *testing.B) {
	m := benchMembers(b)
	caller := Identity{User: "u"}
	o := rb("ns500", "u", "ClusterRole", "pod-reader", userSubject("u"))
	for b.Loop() {
		if err := m.Upsert("member0", o); err != nil {
			b.Fatal(err)
		}
		if r := m.Reach(context.Background(), caller, "list", Resource{Resource: "pods"}); len(r.Groups) != 1 || len(r.Groups[0].Clusters) != 3 {
			b.Fatalf("reach %+v", r)
		}
	}
}

// BenchmarkReachRemembered is every later request until the next change.
func BenchmarkReachRemembered(b *testing.B) {
	m := benchMembers(b)
	caller := Identity{User: "u"}
	m.Reach(context.Background(), caller, "list", Resource{Resource: "pods"})
	for b.Loop() {
		if r := m.Reach(context.Background(), caller, "list", Resource{Resource: "pods"}); len(r.Groups) != 1 {
			b.Fatalf("reach %+v", r)
		}
	}
}

// BenchmarkDecide is a per-cluster request (Members.Decide) in fleets of
// 1 and 2,000 members, each member one small authorizer: the cost must
// not grow with the fleet (only the named member is looked up).
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 2000} {
		b.Run(fmt.Sprint(n, "members"), func(b *testing.B) {
			m := &Members{}
			for c := range n {
				cluster := fmt.Sprint("member", c)
				if err := m.Upsert(cluster, clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods")))); err != nil {
					b.Fatal(err)
				}
				if err := m.Upsert(cluster, rb("shop", "u", "ClusterRole", "pod-reader", userSubject("u"))); err != nil {
					b.Fatal(err)
				}
			}
			caller := Identity{User: "u"}
			req := Request{Verb: "list", Resource: "pods", Namespace: "shop"}
			for b.Loop() {
				if !m.Decide(context.Background(), "member0", caller, req).Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
