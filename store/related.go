package store

import (
	"context"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
)

// relater is a backend that keeps relations (Badger, OpenSearch).
// Relations are answered by the backend that holds the starting object's
// resource in its cluster, from what it holds; a resource routed to a
// backend without them is refused.
type relater interface {
	Related(ctx context.Context, o query.RelatedOptions) (query.Graph, error)
}

// Related implements the query API's Relater.
func (rr *RoutingReader) Related(ctx context.Context, o query.RelatedOptions) (query.Graph, error) {
	if o.Cluster == "" {
		return query.Graph{}, fmt.Errorf("%w: related needs cluster (relations are within one cluster)", query.ErrInvalid)
	}
	b := rr.servedBy(o.GVR, o.Cluster)
	r, ok := rr.backend(b).(relater)
	if !ok {
		return query.Graph{}, fmt.Errorf("%w: %s of cluster %s is stored in a backend that keeps no relations", query.ErrInvalid, o.GVR.GroupResource(), o.Cluster)
	}
	return r.Related(ctx, o)
}
