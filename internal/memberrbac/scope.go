package memberrbac

import (
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Resource names a resource (and optionally a subresource) in an API group,
// for Scope.
type Resource struct {
	APIGroup    string
	Resource    string
	Subresource string
}

// Scope is where an identity may make a collection request (list, watch)
// for one resource in one member: everywhere (All), or in the namespaces
// listed (sorted, each once). It is what a list pushes into the backend:
// Allows(ns) is exactly the member's answer to that verb on the collection
// in namespace ns.
//
// Namespaces holds only namespaces where a RoleBinding grants the verb: a
// namespace need not exist (a RoleBinding may wait for it), and one with
// no RoleBinding is never listed. For a cluster-scoped resource only All
// means anything (a member asks about those cluster-wide, where
// RoleBindings never apply).
type Scope struct {
	All        bool
	Namespaces []string
}

// Allows reports whether the scope covers namespace ns ("" is cluster-wide:
// All only).
func (s Scope) Allows(ns string) bool {
	if s.All {
		return true
	}
	if ns == "" {
		return false
	}
	_, found := slices.BinarySearch(s.Namespaces, ns)
	return found
}

// None reports whether the scope allows nothing.
func (s Scope) None() bool { return !s.All && len(s.Namespaces) == 0 }

// Scope returns where id may make verb (list, watch, or any verb on the
// collection, with no name) on r in this member.
//
// First the member's own cluster-wide decision (system:masters and the
// ClusterRoleBindings): if it allows, the answer is All. ClusterRoleBindings
// apply alike in every namespace, so otherwise they allow nowhere, and the
// answer is the namespaces whose RoleBindings alone allow it, each decided
// by upstream's resolver and rule matching over that namespace's
// RoleBindings (the evaluation Authorize runs, without the
// ClusterRoleBindings already found wanting). The cost is one decision per namespace holding RoleBindings.
func (a *Authorizer) Scope(ctx context.Context, id Identity, verb string, r Resource) Scope {
	u := id.info()
	req := Request{Verb: verb, APIGroup: r.APIGroup, Resource: r.Resource, Subresource: r.Subresource}
	if ok, _ := a.decide(ctx, attributes(u, req)); ok {
		return Scope{All: true}
	}
	var out []string
	for _, ns := range a.store.bindingNamespaces() {
		req.Namespace = ns
		if a.allowedLocally(ctx, u, req) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return Scope{Namespaces: out}
}

// allowedLocally is RBACAuthorizer.Authorize over the namespace's
// RoleBindings, without the reason it formats for every allowed request
// (most of its cost when Scope asks a thousand namespaces): upstream's
// resolver visits the rules that apply to u, upstream's RuleAllows matches
// each.
func (a *Authorizer) allowedLocally(ctx context.Context, u user.Info, req Request) bool {
	attrs := attributes(u, req)
	allowed := false
	a.local.VisitRulesFor(ctx, u, req.Namespace, func(_ fmt.Stringer, rule *rbacv1.PolicyRule, _ error) bool {
		if rule != nil && rbac.RuleAllows(attrs, rule) {
			allowed = true
			return false
		}
		return true
	})
	return allowed
}
