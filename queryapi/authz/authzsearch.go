package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// memberSearch admits a search when the members' RBAC decides reads: a
// search spans resources, so the caller's visibility is, per resource
// searched (those the request names, else every resource the catalog
// serves), where each member lets it list that resource (a search is a
// list of many resources), one grant per group of clusters that grant
// alike; under ModeBoth each is narrowed to the policy's grants for that
// resource. It goes into the backend's query as the policy's visibility
// does: hidden objects are skipped before the limit, so pages are full and
// counts and continue tokens tell nothing of them.
func (g *Guard) memberSearch(ctx context.Context, u auth.User, req any, handler grpc.UnaryHandler) (any, error) {
	sr, ok := req.(*fleetviewv1.SearchRequest)
	if !ok {
		return nil, apierr.ToStatus(fmt.Errorf("%w: unexpected search request %T", auth.ErrForbidden, req))
	}
	vis := g.memberVisibility(ctx, u, g.searched(sr), auth.VerbSearch)
	if vis.None() {
		return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not list any searched resource in any member cluster (member RBAC)", auth.ErrForbidden, u.Name))
	}
	if allowed, all := vis.Clusters(); !all {
		if err := narrowClusters(req, allowed); err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not search the requested clusters", auth.ErrForbidden, u.Name))
		}
	}
	resp, err := handler(WithVisibility(auth.WithUser(ctx, u), vis), req)
	if r, ok := resp.(*fleetviewv1.SearchResponse); ok && err == nil {
		// The backend applied the visibility already; this keeps a
		// backend that ignored it from leaking.
		r.Items = slices.DeleteFunc(r.Items, func(h *fleetviewv1.SearchHit) bool {
			_, ns := objectLocation(h.GetObject(), h.GetRawObject())
			return !vis.Allows(hitResource(h), h.GetCluster(), ns)
		})
	}
	return resp, err
}

func hitResource(h *fleetviewv1.SearchHit) schema.GroupResource {
	return schema.GroupResource{Group: kubepath.GroupFromName(h.GetGvr().GetGroup()), Resource: h.GetGvr().GetResource()}
}

// searched are the resources a search reads: those it names (malformed
// names are left to the service, which refuses them), else every resource
// served.
func (g *Guard) searched(r *fleetviewv1.SearchRequest) []schema.GroupResource {
	if len(r.GetResources()) == 0 {
		if g.served == nil {
			return nil
		}
		return g.served()
	}
	var out []schema.GroupResource
	for _, res := range r.GetResources() {
		p := strings.Split(res, "/")
		if len(p) != 3 {
			continue
		}
		gr := schema.GroupResource{Group: kubepath.GroupFromName(p[0]), Resource: p[2]}
		if !slices.Contains(out, gr) {
			out = append(out, gr)
		}
	}
	return out
}

// memberVisibility is where u may list each resource in the members (and,
// under ModeBoth, where the policy lets it policyVerb too: search for a
// search, list for the change feed).
func (g *Guard) memberVisibility(ctx context.Context, u auth.User, resources []schema.GroupResource, policyVerb string) *query.Visibility {
	var policy *query.Visibility
	if g.policy() {
		if policy = g.visibilityFor(u, policyVerb); policy.None() {
			return policy
		}
	}
	id := memberIdentity(u)
	v := &query.Visibility{}
	for _, gr := range resources {
		reach := g.Members.Reach(ctx, id, auth.VerbList, memberrbac.Resource{APIGroup: gr.Group, Resource: gr.Resource})
		var grants []query.Grant
		if reach.Masters {
			grants = append(grants, query.Grant{Resources: []schema.GroupResource{gr}})
		}
		for _, rg := range reach.Groups {
			qg := query.Grant{Resources: []schema.GroupResource{gr}, Clusters: rg.Clusters, Sorted: true} // a reach's lists are sorted
			if !rg.Scope.All {
				qg.Namespaces = rg.Scope.Namespaces
			}
			grants = append(grants, qg)
		}
		for _, qg := range grants {
			v.Grants = append(v.Grants, narrowGrant(qg, gr, policy)...)
		}
	}
	return v
}

// narrowGrant is what of a member grant for gr the policy's visibility
// also allows (nil policy: all of it).
func narrowGrant(m query.Grant, gr schema.GroupResource, policy *query.Visibility) []query.Grant {
	if policy == nil {
		return []query.Grant{m}
	}
	var out []query.Grant
	for _, p := range policy.Grants {
		if p.Resources == nil && slices.Contains(p.Except, gr) || p.Resources != nil && !slices.Contains(p.Resources, gr) {
			continue
		}
		cs, okC := intersectList(m.Clusters, p.Clusters)
		ns, okN := intersectList(m.Namespaces, p.Namespaces)
		if okC && okN {
			out = append(out, query.Grant{Resources: m.Resources, Clusters: cs, Namespaces: ns, Sorted: slices.IsSorted(cs) && slices.IsSorted(ns)})
		}
	}
	return out
}
