package queryapi

import (
	"context"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// Counter answers counts (the store's RoutingReader). The Reader is asked
// for it: a Reader that cannot count answers every Count InvalidArgument.
type Counter interface {
	Count(ctx context.Context, o query.CountOptions) (query.Counts, error)
}

// maxDimensions bounds a count's group-bys: each multiplies the rows.
const maxDimensions = 4

// Count implements QueryService.Count: List's selection, grouped. The
// Guard admits it as a list of the resource, and its visibility goes to
// the backend, which counts only what the caller may list.
func (q *queryService) Count(ctx context.Context, req *fleetviewv1.CountRequest) (*fleetviewv1.CountResponse, error) {
	resp, err := q.count(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) count(ctx context.Context, req *fleetviewv1.CountRequest) (*fleetviewv1.CountResponse, error) {
	c, ok := q.reader.(Counter)
	if !ok {
		return nil, fmt.Errorf("%w: this server's store cannot count", query.ErrInvalid)
	}
	if len(req.GetBy()) > maxDimensions {
		return nil, fmt.Errorf("%w: by: at most %d dimensions, got %d", query.ErrInvalid, maxDimensions, len(req.GetBy()))
	}
	dims := make([]query.Dimension, len(req.GetBy()))
	for i, b := range req.GetBy() {
		d, err := query.ParseDimension(b)
		if err != nil {
			return nil, err
		}
		dims[i] = d
	}
	f, err := q.selection(ctx, req.GetGroup(), req.GetVersion(), req.GetResource(), req.GetNamespace(), req.GetLabelSelector(), req.GetFieldSelector(), req.GetClusters(), req.GetClusterSelector())
	if err != nil {
		return nil, err
	}
	res, err := c.Count(ctx, query.CountOptions{GVR: f.gvr, Namespace: f.namespace, Labels: f.labels, Fields: f.fields, Clusters: f.clusters, Visible: f.visible, By: dims})
	if err != nil {
		return nil, err
	}
	resp := &fleetviewv1.CountResponse{By: req.GetBy(), Total: res.Total, Scanned: res.Scanned, Rows: make([]*fleetviewv1.CountRow, len(res.Rows))}
	for i, r := range res.Rows {
		resp.Rows[i] = &fleetviewv1.CountRow{Values: r.Values, Count: r.Count}
	}
	return resp, nil
}
