package store

import (
	"context"

	"github.com/fleetview/fleetview/internal/query"
)

// countPage is how many objects one list page of a counted backend holds.
const countPage = 1000

// countByListing counts a backend that has no count of its own
// (or whose indexes do not answer this count: ErrCountUnindexed) by listing the
// selection, page by page, and reading each object's dimensions: the
// cost of a list of the whole selection. The list applies the selectors
// and the caller's visibility as it does for a list, so the count holds
// exactly what the caller may list.
func countByListing(ctx context.Context, b backendReader, o query.CountOptions) (query.Counts, error) {
	t := query.NewTally()
	lo := query.ListOptions{GVR: o.GVR, Namespace: o.Namespace, Labels: o.Labels, Fields: o.Fields, Clusters: o.Clusters, Visible: o.Visible, Limit: countPage}
	vals := make([][]string, len(o.By))
	row := make([]string, len(o.By))
	var joined []byte
	for {
		p, err := b.List(ctx, lo)
		if err != nil {
			return query.Counts{}, err
		}
		for _, it := range p.Items {
			for i, d := range o.By {
				if vals[i], err = d.Values(o.GVR, it.Cluster, it.JSON); err != nil {
					return query.Counts{}, err
				}
			}
			t.Total++
			if len(o.By) == 0 {
				continue
			}
			var rec func(i int)
			rec = func(i int) {
				if i == len(vals) {
					joined = joined[:0]
					for j, v := range row {
						if j > 0 {
							joined = append(joined, 0)
						}
						joined = append(joined, v...)
					}
					t.Add(joined, row, 1)
					return
				}
				for _, v := range vals[i] {
					row[i] = v
					rec(i + 1)
				}
			}
			rec(0)
		}
		if p.Continue == "" {
			return t.Counts("objects"), nil
		}
		lo.Continue = p.Continue
	}
}
