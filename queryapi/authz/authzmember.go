package authz

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/memberrbac"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// AuthorizationMode says what decides a read of cached objects (get,
// list, watch, search): fleetview's policy, each member cluster's own
// RBAC as mirrored on the hub (internal/memberrbac), or both (a read must
// pass both). What is no member's object (the cluster inventory,
// registries) is the policy's in every mode.
type AuthorizationMode string

// The authorization modes.
const (
	ModePolicy     AuthorizationMode = "policy"
	ModeMemberRBAC AuthorizationMode = "member-rbac"
	ModeBoth       AuthorizationMode = "both"
)

// AuthorizationModes lists the modes, for flags and their errors.
func AuthorizationModes() []AuthorizationMode {
	return []AuthorizationMode{ModePolicy, ModeMemberRBAC, ModeBoth}
}

// members reports whether the members' RBAC takes part.
func (g *Guard) members() bool {
	return g.Members != nil && (g.Mode == ModeMemberRBAC || g.Mode == ModeBoth)
}

// policy reports whether fleetview's policy takes part in reads.
func (g *Guard) policy() bool { return g.Mode != ModeMemberRBAC }

// memberIdentity is the caller as fleetview authenticated it; each member
// sees it as memberrbac.Members.Identity says (the same user and groups by
// default, mapped by --member-identity-map, plus system:authenticated,
// which every member's authenticator adds).
func memberIdentity(u auth.User) memberrbac.Identity {
	return memberrbac.Identity{User: u.Name, Groups: slices.Clone(u.Groups)}
}

func memberResource(rr resourceRequest) memberrbac.Resource {
	g := kubepath.GroupFromName(rr.GetGroup())
	return memberrbac.Resource{APIGroup: g, Resource: rr.GetResource()}
}

// memberReach is where u may make verb on the resource in the members.
func (g *Guard) memberReach(ctx context.Context, u auth.User, verb string, rr resourceRequest) memberrbac.Reach {
	return g.Members.Reach(ctx, memberIdentity(u), verb, memberResource(rr))
}

// memberScope is the members' answer to a resource request as a scope
// (nil: everywhere), or Forbidden.
//
// A request that names one cluster (a Get with its cluster, a list or
// watch of one cluster: everything under /clusters/<member>/) is that
// member's: allowed or forbidden exactly as its SubjectAccessReview
// answers the request as sent (memberClusterScope). Any other request is
// the fleet view: the members' answers for the collection, per cluster
// everywhere or the namespaces it may use the verb in. A request naming a
// namespace that no member allows is Forbidden, as each member would
// answer; one across all namespaces answers what the caller may see in
// each member.
func (g *Guard) memberScope(ctx context.Context, u auth.User, verb string, rr resourceRequest, req any) (*auth.Scope, error) {
	if c, name, ok := oneCluster(req); ok {
		return g.memberClusterScope(ctx, u, c, verb, rr, name)
	}
	reach := g.memberReach(ctx, u, verb, rr)
	if reach.Masters {
		return nil, nil
	}
	if r := memberResource(rr); g.clusterScoped != nil && g.clusterScoped(schema.GroupResource{Group: r.APIGroup, Resource: r.Resource}) {
		// A member asks about a cluster-scoped resource cluster-wide,
		// where RoleBindings never apply: only clusters allowing it
		// everywhere count, and none is Forbidden, as the member says.
		reach = clusterWide(reach)
	}
	res := resourceName(rr)
	if reach.None() {
		return nil, fmt.Errorf("%w: user %q may not %s %s in any member cluster (member RBAC)", auth.ErrForbidden, u.Name, verb, res)
	}
	if ns := rr.GetNamespace(); ns != "" && !slices.ContainsFunc(reach.Groups, func(g memberrbac.ReachGroup) bool { return g.Scope.Allows(ns) }) {
		return nil, fmt.Errorf("%w: user %q may not %s %s in namespace %s in any member cluster (member RBAC)", auth.ErrForbidden, u.Name, verb, res, ns)
	}
	return reachScope(reach), nil
}

// memberClusterScope is the answer of cluster alone: the request as
// kube-apiserver's request info would give it to the member's authorizer
// (verb, group, resource, namespace, and the name: a Get's, or a list's or
// watch's metadata.name field selector), decided by that member's mirrored
// RBAC only (memberrbac.Members.Decide: one lookup, whatever the fleet's
// size). Allowed: the cluster, where the request itself says which
// namespace. Forbidden: kube-apiserver's words, with the member's reason.
func (g *Guard) memberClusterScope(ctx context.Context, u auth.User, cluster, verb string, rr resourceRequest, name string) (*auth.Scope, error) {
	r := memberResource(rr)
	mreq := memberrbac.Request{Verb: verb, APIGroup: r.APIGroup, Resource: r.Resource, Namespace: rr.GetNamespace(), Name: name}
	if _, isGet := rr.(*fleetviewv1.GetRequest); isGet && r.APIGroup == "" && r.Resource == "namespaces" {
		// /api/v1/namespaces/NAME: kube-apiserver's request info takes
		// the namespace from the path, so a RoleBinding in NAME may grant it.
		mreq.Namespace = name
	}
	d := g.Members.Decide(ctx, cluster, memberIdentity(u), mreq)
	if d.Allowed {
		return &auth.Scope{Pairs: []auth.ClusterNamespaces{{Clusters: []string{cluster}, Sorted: true}}}, nil
	}
	who := d.Identity.User
	if who == "" {
		who = u.Name // the map gives the caller no identity there; its reason says why
	}
	return nil, memberForbidden{msg: memberrbac.ForbiddenMessage(who, mreq, d.Reason)}
}

// memberForbidden is a member's refusal: Forbidden, in the member's words
// (its Error is the whole message, as kube-apiserver's Status carries it).
type memberForbidden struct{ msg string }

func (e memberForbidden) Error() string { return e.msg }
func (e memberForbidden) Unwrap() error { return auth.ErrForbidden }

// oneCluster is the cluster a request names alone (a Get with its
// cluster; a list or watch of exactly one cluster by name, no cluster
// selector) and the object name a member's authorizer would be asked
// about: a Get's, or a list's or watch's metadata.name field selector when
// it requires one name, as kube-apiserver's request info takes it (only a
// valid path segment).
func oneCluster(req any) (cluster, name string, ok bool) {
	var clusters []string
	var sel, clusterSel string
	switch r := req.(type) {
	case *fleetviewv1.GetRequest:
		return r.GetCluster(), r.GetName(), r.GetCluster() != ""
	case *fleetviewv1.ListRevisionsRequest:
		return r.GetCluster(), r.GetName(), r.GetCluster() != ""
	case *fleetviewv1.ListRequest:
		clusters, sel, clusterSel = r.GetClusters(), r.GetFieldSelector(), r.GetClusterSelector()
	case *fleetviewv1.WatchRequest:
		clusters, sel, clusterSel = r.GetClusters(), r.GetFieldSelector(), r.GetClusterSelector()
	case *fleetviewv1.CountRequest:
		clusters, sel, clusterSel = r.GetClusters(), r.GetFieldSelector(), r.GetClusterSelector()
	default:
		return "", "", false
	}
	if len(clusters) != 1 || clusterSel != "" {
		return "", "", false
	}
	if sel != "" {
		if fs, err := fields.ParseSelector(sel); err == nil {
			if n, exact := fs.RequiresExactMatch("metadata.name"); exact && len(content.IsPathSegmentName(n)) == 0 {
				name = n
			}
		}
	}
	return clusters[0], name, true
}

// clusterWide is the part of a reach that allows everywhere (a new Reach:
// the one given is shared by the memo).
func clusterWide(r memberrbac.Reach) memberrbac.Reach {
	out := memberrbac.Reach{Masters: r.Masters}
	for _, g := range r.Groups {
		if g.Scope.All {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}

// reachScope is a reach as a scope: one pair per group of clusters.
func reachScope(r memberrbac.Reach) *auth.Scope {
	s := &auth.Scope{Pairs: make([]auth.ClusterNamespaces, 0, len(r.Groups))}
	for _, gr := range r.Groups {
		p := auth.ClusterNamespaces{Clusters: gr.Clusters, Sorted: true} // a reach's lists are sorted
		if !gr.Scope.All {
			p.Namespaces = gr.Scope.Namespaces
		}
		s.Pairs = append(s.Pairs, p)
	}
	return s
}

// intersectScopes is what both scopes allow (nil: everything).
func intersectScopes(a, b *auth.Scope) *auth.Scope {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := &auth.Scope{}
	for _, p := range a.Pairs {
		for _, q := range b.Pairs {
			cs, okC := intersectList(p.Clusters, q.Clusters)
			ns, okN := intersectList(p.Namespaces, q.Namespaces)
			if okC && okN {
				out.Pairs = append(out.Pairs, auth.ClusterNamespaces{Clusters: cs, Namespaces: ns, Sorted: slices.IsSorted(cs) && slices.IsSorted(ns)})
			}
		}
	}
	return out
}

// intersectList intersects two restrictions, empty meaning all; ok is
// false when they have nothing in common.
func intersectList(a, b []string) (_ []string, ok bool) {
	if len(a) == 0 {
		return b, true
	}
	if len(b) == 0 {
		return a, true
	}
	var out []string
	for _, v := range a {
		if slices.Contains(b, v) && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, len(out) > 0
}
