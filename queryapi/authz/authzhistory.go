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
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// changes admits the fleet's change feed (issue #48). The feed spans
// resources as a search does, so it is admitted the way a search is, with
// list as the verb: an entry tells what an object was, which is reading
// it. The caller's visibility is, per resource, where the policy lets it
// list (a "*" rule never reaches Secrets unless it names them) and, under
// a member-RBAC mode, where each member lets it list that resource (both,
// under ModeBoth). It goes into the backend's query, so hidden changes are
// skipped before the limit: pages are full and a continue token tells
// nothing of them. It is today's visibility: a change made while the
// caller could read the object is hidden once it no longer can.
//
// An object's revisions (ListRevisions) are admitted as a Get of the
// object (VerbFor), in Unary.
func (g *Guard) changes(ctx context.Context, u auth.User, req any, handler grpc.UnaryHandler) (any, error) {
	cr, ok := req.(*fleetviewv1.ListChangesRequest)
	if !ok {
		return nil, apierr.ToStatus(fmt.Errorf("%w: unexpected change feed request %T", auth.ErrForbidden, req))
	}
	// Comma lists split first, so the clusters are narrowed name by name.
	cr.Clusters = splitComma(cr.GetClusters())
	var vis *query.Visibility
	if g.members() {
		vis = g.memberVisibility(ctx, u, g.changed(cr), auth.VerbList)
	} else {
		vis = g.visibilityFor(u, auth.VerbList)
	}
	if vis.None() {
		return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not list any resource of the change feed in any member cluster", auth.ErrForbidden, u.Name))
	}
	if allowed, all := vis.Clusters(); !all {
		if err := narrowClusters(req, allowed); err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not read the changes of the requested clusters", auth.ErrForbidden, u.Name))
		}
	}
	resp, err := handler(WithVisibility(auth.WithUser(ctx, u), vis), req)
	if r, ok := resp.(*fleetviewv1.ListChangesResponse); ok && err == nil {
		// The backend applied the visibility already; this keeps a
		// backend that ignored it from leaking.
		r.Changes = slices.DeleteFunc(r.Changes, func(e *fleetviewv1.HistoryEntry) bool {
			gr := schema.GroupResource{Group: kubepath.GroupFromName(e.GetGroup()), Resource: e.GetResource()}
			return !vis.Allows(gr, e.GetCluster(), e.GetNamespace())
		})
	}
	return resp, err
}

// changed are the resources a change feed reads: those it names
// (resource[.group]; malformed names are left to the service, which
// refuses them), else every resource served.
func (g *Guard) changed(r *fleetviewv1.ListChangesRequest) []schema.GroupResource {
	names := splitComma(r.GetResources())
	if len(names) == 0 {
		if g.served == nil {
			return nil
		}
		return g.served()
	}
	var out []schema.GroupResource
	for _, n := range names {
		gr := schema.ParseGroupResource(n)
		gr.Group = kubepath.GroupFromName(gr.Group)
		if !slices.Contains(out, gr) {
			out = append(out, gr)
		}
	}
	return out
}

// changedResources names a change feed's resources for the audit log.
func changedResources(rs []string) string {
	names := splitComma(rs)
	if len(names) == 0 {
		return "*"
	}
	return strings.Join(names, ",")
}

// splitComma reads a repeated parameter whose entries may be
// comma-separated lists.
func splitComma(vs []string) []string {
	var out []string
	for _, v := range vs {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
