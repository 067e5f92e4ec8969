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

// related admits a Related read. Like a search it spans resources, so the
// caller's visibility is the one a search gets (the policy's grants, and
// under member RBAC what each member lets the caller list of every served
// resource); the backend neither answers nor follows a node outside it,
// so no edge names an object the caller cannot read. The answer is
// filtered again here, against a backend that ignored it.
func (g *Guard) related(ctx context.Context, u auth.User, req any, handler grpc.UnaryHandler) (any, error) {
	if _, ok := req.(*fleetviewv1.RelatedRequest); !ok {
		return nil, apierr.ToStatus(fmt.Errorf("%w: unexpected related request %T", auth.ErrForbidden, req))
	}
	vis := g.crossVisibility(ctx, u)
	if vis.None() {
		return nil, apierr.ToStatus(fmt.Errorf("%w: user %q may not read related objects of any resource", auth.ErrForbidden, u.Name))
	}
	resp, err := handler(WithVisibility(auth.WithUser(ctx, u), vis), req)
	if r, ok := resp.(*fleetviewv1.RelatedResponse); ok && err == nil {
		FilterRelated(r, vis)
	}
	return resp, err
}

// FilterRelated drops the nodes vis does not allow and every edge that
// names one. A node whose resource is unknown (a reference to a kind the
// store never held) is dropped unless vis allows everything.
func FilterRelated(r *fleetviewv1.RelatedResponse, vis *query.Visibility) {
	if vis == nil {
		return
	}
	kept := map[string]bool{}
	r.Nodes = slices.DeleteFunc(r.Nodes, func(n *fleetviewv1.RelatedNode) bool {
		gr := schema.GroupResource{Group: kubepath.GroupFromName(n.GetGroup()), Resource: n.GetResource()}
		if gr.Resource == "" || !vis.Allows(gr, n.GetCluster(), n.GetNamespace()) {
			return true
		}
		kept[n.GetId()] = true
		return false
	})
	r.Edges = slices.DeleteFunc(r.Edges, func(e *fleetviewv1.RelatedEdge) bool {
		return !kept[e.GetFrom()] || !kept[e.GetTo()]
	})
}

// crossVisibility is what u may read of every resource: a search's
// visibility.
func (g *Guard) crossVisibility(ctx context.Context, u auth.User) *query.Visibility {
	if g.members() {
		return g.memberVisibility(ctx, u, g.searched(&fleetviewv1.SearchRequest{}), auth.VerbSearch)
	}
	return g.visibility(u)
}

type relationVisibilityKey struct{}

// relationVisibility hands a list whose field selector has relation
// fields (fleetview.io/ownedBy, ...) the caller's visibility over every
// resource: the list's own visibility covers the listed resource, but a
// relation goes through others (an owner, a selecting Service, a
// referenced Secret), and one the caller cannot read must select nothing.
func (g *Guard) relationVisibility(ctx context.Context, u auth.User, req any) context.Context {
	lr, ok := req.(*fleetviewv1.ListRequest)
	if !ok || !strings.Contains(lr.GetFieldSelector(), "fleetview.io/") {
		return ctx
	}
	return context.WithValue(ctx, relationVisibilityKey{}, g.crossVisibility(ctx, u))
}

// RelationVisibleFrom is what a relation field selector may go through:
// nil (everything) when no Guard runs.
func RelationVisibleFrom(ctx context.Context) *query.Visibility {
	v, _ := ctx.Value(relationVisibilityKey{}).(*query.Visibility)
	return v
}
