package opensearch

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// Search matches text (full text over names, namespaces, label and
// annotation keys and values; the whole object too with FullTextObject)
// across resources, ordered like List.
func (s *Store) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	var page query.Page
	cur, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	after := cur.After
	var filter []any
	if len(o.Resources) > 0 {
		keys := make([]string, len(o.Resources))
		for i, g := range o.Resources {
			keys[i] = gvrKey(g)
		}
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.gvr": keys}})
	}
	if o.Namespace != "" {
		filter = append(filter, term("metadata.namespace.keyword", o.Namespace))
	}
	if o.Clusters != nil {
		if len(o.Clusters) == 0 {
			return page, nil
		}
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": o.Clusters}})
	}
	if o.Visible != nil {
		if o.Visible.None() {
			return page, nil
		}
		filter = append(filter, visibilityFilter(o.Visible))
	}
	boolQ := map[string]any{"filter": filter}
	if t := strings.TrimSpace(o.Text); t != "" {
		boolQ["must"] = []any{map[string]any{"simple_query_string": map[string]any{
			"query": t, "default_operator": "and",
			"fields": s.searchFields(),
		}}}
	}
	// One page of at most 1000 (the default search window ends at 10000).
	limit := o.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	body := map[string]any{"size": limit + 1, "sort": sortKeys, "query": map[string]any{"bool": boolQ}}
	if after != nil {
		body["search_after"] = searchAfter(after)
	}
	// Every page of a paged search reads the point in time of its first,
	// as on Badger, under the same quota as lists.
	pp := s.openPage(ctx, cur.PIT, o.Client, o.Limit > 0)
	hits, err := s.search(ctx, body, pp.pit)
	if pp.lostOwn(ctx, err) {
		hits, err = s.search(ctx, body, "") // as in List
	}
	if err != nil {
		pp.done(ctx, err)
		return page, err
	}
	for i := range hits {
		if int64(len(page.Items)) == limit {
			m := hits[i-1].Source.Metadata
			page.Continue = encodeContinue(cursor{After: []string{m.Namespace, m.Name, hits[i-1].Source.FV.Cluster}, PIT: pp.pit})
			break
		}
		page.Items = append(page.Items, hits[i].object())
	}
	if page.Continue == "" {
		pp.done(ctx, nil)
		return page, nil
	}
	return page, pp.token(ctx)
}

// visibilityFilter is the caller's visibility as a query clause: any one
// grant (its resources, clusters and namespaces) admits a document. In
// the query, not on the hits, so the size of a page counts visible
// documents only and search_after never lands on a hidden one.
func visibilityFilter(v *query.Visibility) map[string]any {
	gr := func(g schema.GroupResource) map[string]any {
		return map[string]any{"bool": map[string]any{"filter": []any{term("fleetview.group", g.Group), term("fleetview.resource", g.Resource)}}}
	}
	should := make([]any, 0, len(v.Grants))
	for _, g := range v.Grants {
		must, mustNot := []any{}, []any{}
		if g.Resources != nil {
			alts := make([]any, len(g.Resources))
			for i, r := range g.Resources {
				alts[i] = gr(r)
			}
			must = append(must, map[string]any{"bool": map[string]any{"should": alts, "minimum_should_match": 1}})
		}
		for _, r := range g.Except {
			mustNot = append(mustNot, gr(r))
		}
		if len(g.Clusters) > 0 {
			must = append(must, map[string]any{"terms": map[string]any{"fleetview.cluster": g.Clusters}})
		}
		if len(g.Namespaces) > 0 {
			// Cluster-scoped documents have no namespace: no term matches.
			must = append(must, map[string]any{"terms": map[string]any{"metadata.namespace.keyword": g.Namespaces}})
		}
		b := map[string]any{"filter": must}
		if len(mustNot) > 0 {
			b["must_not"] = mustNot
		}
		should = append(should, map[string]any{"bool": b})
	}
	return map[string]any{"bool": map[string]any{"should": should, "minimum_should_match": 1}}
}

func (s *Store) searchFields() []string {
	f := []string{"metadata.name", "metadata.namespace", "fleetview.labels", "fleetview.text"}
	if s.opts.FullTextObject {
		f = append(f, "fleetview.object")
	}
	return f
}
