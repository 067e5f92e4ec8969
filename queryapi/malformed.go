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
// for every cluster it spans. The materializer refuses such objects (it
// checks the whole grammar before it applies one), so objects of the
// Badger store, which only it writes, come Checked and are not checked
// again: the check costs about as much as the rest of a list's work per
// object (BenchmarkDropMalformed; measured:
// docs/benchmarks/query.md#figures-behind-code-comments). Objects of a
// store other writers can reach (OpenSearch) are checked here. The items
// are filtered in place.
func (q *queryService) dropMalformed(ctx context.Context, verb string, items []query.Object) []query.Object {
	for i, it := range items {
		if checked(it) == nil {
			continue
		}
		// Something is bad: filter the rest, from here on.
		out := items[:i]
		for _, it := range items[i:] {
			if err := checked(it); err != nil {
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
	if err := checked(o); err != nil {
		q.reportMalformed(ctx, "get", o.Cluster, err)
		return fmt.Errorf("%w: stored object in cluster %q: %w", query.ErrCorrupt, o.Cluster, err)
	}
	return nil
}

// checked is rawjson.Check of an object its backend did not vouch for.
func checked(o query.Object) error {
	if o.Checked {
		return nil
	}
	return rawjson.Check(o.JSON)
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
