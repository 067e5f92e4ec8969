package queryapi

import (
	"context"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// dropMalformed leaves out of a page's items every stored object that is
// not one JSON object valid by the whole grammar (rawjson.Check), and
// reports each (reportMalformed). Answers are written from the stored bytes
// as they are: lists concatenate them, watch lines and Tables embed or
// decode them, so one bad object would make the answer invalid, or a 500,
// for every cluster it spans. The materializer refuses such objects since
// it checks the whole grammar, but a store written before that, or by
// another writer, may hold them. The check costs about a third of
// json.Valid per object; the items are filtered in place.
func (q *queryService) dropMalformed(ctx context.Context, verb string, items []query.Object) []query.Object {
	for i, it := range items {
		if rawjson.Check(it.JSON) == nil {
			continue
		}
		// Something is bad: filter the rest, from here on.
		out := items[:i]
		for _, it := range items[i:] {
			if err := rawjson.Check(it.JSON); err != nil {
				q.reportMalformed(ctx, verb, it.Cluster, err)
				continue
			}
			out = append(out, it)
		}
		return out
	}
	return items
}

// checkObject is dropMalformed for the one object of a Get: the answer is
// that object alone, so it is an error naming what is wrong, not a skip.
func (q *queryService) checkObject(ctx context.Context, o query.Object) error {
	if err := rawjson.Check(o.JSON); err != nil {
		q.reportMalformed(ctx, "get", o.Cluster, err)
		return fmt.Errorf("%w: stored object in cluster %q: %w", query.ErrCorrupt, o.Cluster, err)
	}
	return nil
}

// reportMalformed counts and logs one malformed stored object left out.
func (q *queryService) reportMalformed(ctx context.Context, verb, cluster string, err error) {
	if q.metrics != nil {
		q.metrics.malformed.WithLabelValues(cluster).Inc()
	}
	if q.log != nil {
		q.log.WarnContext(ctx, "malformed stored object left out of an answer", "verb", verb, "cluster", cluster, "err", err)
	}
}
