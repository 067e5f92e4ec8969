package authz

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/memberrbac"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

// discoveryView answers ListClusters for a caller who may not list
// clusters: what Kubernetes discovery needs (the Kubernetes API builds it
// from the inventory, with the caller's credentials) and no more. As in
// Kubernetes, where any authenticated user may read discovery, the answer
// needs no rule of its own; unlike it, it holds only the clusters in which
// some rule lets the caller get, list or watch a cached resource, each
// with its cached resources' names and kinds and nothing else an
// inventory record says (labels, conditions, counts).
func (g *Guard) discoveryView(ctx context.Context, u auth.User, req any, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, err
	}
	full, ok := resp.(*fleetviewv1.ListClustersResponse)
	if !ok {
		return nil, apierr.ToStatus(fmt.Errorf("%w: unexpected cluster list %T", auth.ErrForbidden, resp))
	}
	readers := map[schema.GroupResource]func(string) bool{}
	readable := func(cluster string, r *fleetviewv1.ResourceSyncState) bool {
		group := kubepath.GroupFromName(r.GetGvr().GetGroup())
		gr := schema.GroupResource{Group: group, Resource: r.GetGvr().GetResource()}
		in, ok := readers[gr]
		if !ok {
			in = g.readable(ctx, u, gr)
			readers[gr] = in
		}
		return in(cluster)
	}
	view := &fleetviewv1.ListClustersResponse{}
	for _, c := range full.GetClusters() {
		if !slices.ContainsFunc(c.GetResources(), func(r *fleetviewv1.ResourceSyncState) bool { return readable(c.GetName(), r) }) {
			continue
		}
		// Every resource the cluster caches, as Kubernetes discovery lists
		// every resource whatever RBAC says: a read of one the caller may
		// not read is then a 403 that says so, not a 404.
		keep := make([]*fleetviewv1.ResourceSyncState, 0, len(c.GetResources()))
		for _, r := range c.GetResources() {
			keep = append(keep, &fleetviewv1.ResourceSyncState{Gvr: r.GetGvr(), Kind: r.GetKind(), Namespaced: r.GetNamespaced(),
				ShortNames: r.GetShortNames(), Categories: r.GetCategories()})
		}
		view.Clusters = append(view.Clusters, &fleetviewv1.Cluster{Name: c.GetName(), KubernetesVersion: c.GetKubernetesVersion(), Resources: keep})
	}
	return view, nil
}

// CatalogVisibility judges the caller of a Kubernetes API request for the
// resource catalog, as discoveryView judges ListClusters: a caller who may
// list clusters sees it all; any other sees the clusters where some rule
// lets it get, list or watch a resource. No call is made, so discovery
// writes no audit line; the read it precedes writes its own.
func (g *Guard) CatalogVisibility(r *http.Request) (catalog.Visible, error) {
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", a))
	}
	u, err := g.identify(ctx)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	if g.Authorizer.Authorize(u, auth.VerbList, "clusters", "", "") == nil {
		return nil, nil
	}
	// Under member-rbac a request under /clusters/<member>/ is that
	// member's to answer (memberClusterScope): the cluster it names is
	// known to the caller, as a member's discovery is open to any
	// authenticated user, so a read it forbids is its 403, not a 404 of an
	// unknown cluster. The cluster list and the fleet view still show only
	// the clusters where the caller may read something.
	named := ""
	if g.members() && !g.policy() {
		named = pathCluster(r.URL.Path)
	}
	// One scope per resource and verb for the whole request, however many
	// clusters the catalog holds.
	memo := map[schema.GroupResource]func(string) bool{}
	return func(cluster string, gr schema.GroupResource) bool {
		if named != "" && cluster == named {
			return true
		}
		in, ok := memo[gr]
		if !ok {
			in = g.readable(ctx, u, gr)
			memo[gr] = in
		}
		return in(cluster)
	}, nil
}

// readable returns, for one resource, whether u may get, list or watch it
// in a cluster: by the policy, the members' RBAC, or both, as the mode
// says.
func (g *Guard) readable(ctx context.Context, u auth.User, gr schema.GroupResource) func(cluster string) bool {
	verbs := []string{auth.VerbGet, auth.VerbList, auth.VerbWatch}
	pol := func(string) bool { return true }
	if g.policy() {
		name := auth.Resource(gr.Group, gr.Resource)
		all, clusters := false, []string(nil)
		for _, verb := range verbs {
			cs, a := g.Authorizer.Scope(u, verb, name).Clusters()
			all = all || a
			clusters = append(clusters, cs...)
		}
		pol = func(c string) bool { return all || slices.Contains(clusters, c) }
	}
	mem := func(string) bool { return true }
	if g.members() {
		id, r := memberIdentity(u), memberrbac.Resource{APIGroup: gr.Group, Resource: gr.Resource}
		reaches := make([]memberrbac.Reach, 0, len(verbs))
		for _, verb := range verbs {
			reaches = append(reaches, g.Members.Reach(ctx, id, verb, r))
		}
		mem = func(c string) bool {
			return slices.ContainsFunc(reaches, func(r memberrbac.Reach) bool { return r.HasCluster(c) })
		}
	}
	return func(c string) bool { return pol(c) && mem(c) }
}

// pathCluster is the cluster a Kubernetes API path names
// (/clusters/<name>/...), "" for the fleet view.
func pathCluster(path string) string {
	rest, ok := strings.CutPrefix(path, "/clusters/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}
