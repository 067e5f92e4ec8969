package queryapi

import (
	"context"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// Relater answers relationship reads (the store's RoutingReader). The
// Reader is asked for it: a Reader without it answers every Related
// InvalidArgument.
type Relater interface {
	Related(ctx context.Context, o query.RelatedOptions) (query.Graph, error)
}

// Related implements QueryService.Related. The Guard admits it with the
// caller's visibility over every resource, which goes to the backend.
func (q *queryService) Related(ctx context.Context, req *fleetviewv1.RelatedRequest) (*fleetviewv1.RelatedResponse, error) {
	resp, err := q.related(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) related(ctx context.Context, req *fleetviewv1.RelatedRequest) (*fleetviewv1.RelatedResponse, error) {
	rel, ok := q.reader.(Relater)
	if !ok {
		return nil, fmt.Errorf("%w: this server's store keeps no relations", query.ErrInvalid)
	}
	gvr, err := authz.RequestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, err
	}
	g, err := rel.Related(ctx, query.RelatedOptions{GVR: gvr, Namespace: req.GetNamespace(), Name: req.GetName(), Cluster: req.GetCluster(),
		Depth: int(req.GetDepth()), Kinds: req.GetKinds(), Visible: authz.VisibleFrom(ctx)})
	if err != nil {
		return nil, err
	}
	return RelatedResponse(g), nil
}

// RelatedResponse is a graph as the API answers it.
func RelatedResponse(g query.Graph) *fleetviewv1.RelatedResponse {
	resp := &fleetviewv1.RelatedResponse{Truncated: g.Truncated, Nodes: make([]*fleetviewv1.RelatedNode, len(g.Nodes)), Edges: make([]*fleetviewv1.RelatedEdge, len(g.Edges))}
	for i, n := range g.Nodes {
		resp.Nodes[i] = &fleetviewv1.RelatedNode{Id: n.ID(), Cluster: n.Cluster, Group: n.Group, Version: n.Version, Resource: n.Resource,
			Kind: n.Kind, Namespace: n.Namespace, Name: n.Name, Uid: n.UID, Cached: n.Cached}
	}
	for i, e := range g.Edges {
		resp.Edges[i] = &fleetviewv1.RelatedEdge{Type: e.Type, From: e.From, To: e.To}
	}
	return resp
}

// noRelations refuses relation field selectors where they cannot be
// answered (a watch: which objects a relation selects changes with other
// objects' events, which a watch of one resource does not see), rather
// than matching nothing.
func noRelations(f *query.FieldFilter, what string) error {
	if rfs := f.Relations(); len(rfs) > 0 {
		return fmt.Errorf("%w: fieldSelector: %s is not supported in %s (only in lists)", query.ErrInvalid, rfs[0].Field, what)
	}
	return nil
}
