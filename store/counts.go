package store

import (
	"context"
	"errors"

	"github.com/fleetview/fleetview/internal/query"
)

// counter is a backend that counts from its indexes (Badger, OpenSearch's
// aggregations); one without it, or that answers ErrCountUnindexed, is
// counted by listing (countlist.go).
type counter interface {
	Count(ctx context.Context, o query.CountOptions) (query.Counts, error)
}

// Count implements the query API's Counter: each backend counts the
// clusters it holds of the resource, and the groups are summed (a cluster
// is in one backend per resource, so no object is counted twice).
func (rr *RoutingReader) Count(ctx context.Context, o query.CountOptions) (query.Counts, error) {
	t := query.NewTally()
	scanned := ""
	for _, gvr := range o.Resources() {
		parts, err := rr.split(ctx, gvr, o.Clusters)
		if err != nil {
			return query.Counts{}, err
		}
		for b, cs := range parts {
			one := o
			one.GVR, one.More, one.Clusters = gvr, nil, cs
			var res query.Counts
			var err error
			c, ok := rr.backend(b).(counter)
			if ok {
				res, err = c.Count(ctx, one)
			}
			if !ok || errors.Is(err, ErrCountUnindexed) {
				res, err = countByListing(ctx, rr.backend(b), one)
			}
			if err != nil {
				return query.Counts{}, err
			}
			for _, r := range res.Rows {
				t.AddRow(r)
			}
			t.Total += res.Total
			scanned = query.CostlierScan(scanned, res.Scanned)
		}
	}
	if scanned == "" {
		scanned = "index" // nothing to count
	}
	return t.Counts(scanned), nil
}
