package opensearch

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// labelClauses turns a selector into filter and must_not clauses on the
// label keywords; the selector is also checked on every hit, so clauses
// only need to narrow, never to be exact (Gt and Lt only require the key).
func labelClauses(sel labels.Selector) (filter, mustNot []any) {
	if sel == nil {
		return nil, nil
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		k := r.Key()
		vals := r.Values().List()
		kv := make([]string, len(vals))
		for i, v := range vals {
			kv[i] = k + "=" + v
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.labels": kv}})
		case selection.NotEquals, selection.NotIn:
			mustNot = append(mustNot, map[string]any{"terms": map[string]any{"fleetview.labels": kv}})
		case selection.Exists, selection.GreaterThan, selection.LessThan:
			filter = append(filter, term("fleetview.labelKeys", k))
		case selection.DoesNotExist:
			mustNot = append(mustNot, term("fleetview.labelKeys", k))
		}
	}
	return filter, mustNot
}

// List returns one page of objects ordered by namespace, name, cluster.
func (s *Store) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	var page query.Page
	if !o.AsOf.IsZero() {
		return page, noHistory(o.GVR)
	}
	cur, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	v := cur.Version
	if v == nil {
		if v, err = s.Versions(ctx); err != nil {
			return page, err
		}
	}
	v.Keep(o.Clusters)
	page.Version = v
	if o.Clusters != nil && len(o.Clusters) == 0 || o.Visible.None() {
		return page, nil
	}
	boolQ := listQuery(o)
	if len(o.Fields.Relations()) > 0 {
		f, ok, err := s.relationFilter(ctx, o)
		if err != nil || !ok {
			return page, err
		}
		boolQ["filter"] = append(boolQ["filter"].([]any), f)
		o.Fields = o.Fields.RelationsResolved()
	}
	pp := s.openPage(ctx, cur.PIT, o.Client, o.Limit > 0)
	l := listScan{s: s, o: o, sel: o.LabelSelector(), boolQ: boolQ, chunk: listChunk(o.Limit),
		searchAfter: searchAfter(cur.After), pit: pp.pit, page: page}
	scan := l
	page, err = scan.run(ctx)
	if pp.lostOwn(ctx, err) {
		// No client holds this snapshot yet: read the first page live
		// rather than answer 410 to a fresh list.
		scan, scan.pit = l, ""
		page, err = scan.run(ctx)
	}
	if err == nil && page.Continue != "" {
		err = pp.token(ctx)
	} else {
		pp.done(ctx, err)
	}
	return page, err
}

// listQuery narrows a list on the server; the selectors are still checked
// on every hit, as the label clauses are not exact.
func listQuery(o query.ListOptions) map[string]any {
	filter := []any{term("fleetview.gvr", gvrKey(o.GVR))}
	ns := o.Namespace
	if fns, ok := o.Fields.Namespace(); ok && ns == "" {
		ns = fns
	}
	if ns != "" {
		filter = append(filter, term("metadata.namespace.keyword", ns))
	}
	if len(o.Clusters) > 0 {
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": o.Clusters}})
	}
	if o.Visible != nil {
		filter = append(filter, visibilityFilter(o.Visible))
	}
	lf, mustNot := labelClauses(o.Labels)
	filter = append(filter, lf...)
	boolQ := map[string]any{"filter": filter}
	if len(mustNot) > 0 {
		boolQ["must_not"] = mustNot
	}
	return boolQ
}

// listChunk is the hits fetched per request: one more than a small page,
// so one request usually proves whether a next page exists.
func listChunk(limit int64) int {
	chunk := 1000
	if limit > 0 && limit+1 < int64(chunk) {
		chunk = int(limit) + 1
	}
	return chunk
}

// searchAfter resumes strictly after (namespace, name, cluster): any uid
// of that key sorts after "", so use the largest key below the next
// cluster. nil starts at the beginning.
func searchAfter(after []string) []any {
	if after == nil {
		return nil
	}
	return []any{after[0], after[1], after[2], "\U0010FFFF"}
}

// listScan is one List page, read in chunks of hits until it is full or
// the hits run out.
type listScan struct {
	s           *Store
	o           query.ListOptions
	sel         labels.Selector
	boolQ       map[string]any
	chunk       int
	searchAfter []any  // sort values of the last hit seen, matching or not
	pit         string // "": pages are read live
	page        query.Page
	last        [3]string // namespace, name and cluster of the last item
}

func (l *listScan) run(ctx context.Context) (query.Page, error) {
	for {
		body := map[string]any{"size": l.chunk, "sort": sortKeys, "query": map[string]any{"bool": l.boolQ}}
		if l.searchAfter != nil {
			body["search_after"] = l.searchAfter
		}
		hits, err := l.s.search(ctx, body, l.pit)
		if err != nil {
			return l.page, err
		}
		if full, err := l.add(hits); err != nil || full {
			return l.page, err
		}
		if len(hits) < l.chunk {
			return l.page, nil // the last page
		}
	}
}

// add applies the selectors to a chunk of hits; true when a match beyond
// a full page proved a next page and set its continue token.
func (l *listScan) add(hits []hit) (bool, error) {
	for i := range hits {
		h := &hits[i]
		l.searchAfter = h.Sort
		if !l.sel.Matches(h.labels()) {
			continue
		}
		m := h.Source.Metadata
		if ok, err := l.o.Fields.Matches(m.Namespace, m.Name, []byte(h.Source.FV.Object)); err != nil {
			return false, err
		} else if !ok {
			continue
		}
		if l.o.Limit > 0 && int64(len(l.page.Items)) == l.o.Limit {
			l.page.Continue = encodeContinue(cursor{After: []string{l.last[0], l.last[1], l.last[2]}, Version: l.page.Version, PIT: l.pit})
			return true, nil
		}
		l.page.Items = append(l.page.Items, h.object())
		l.last = [3]string{m.Namespace, m.Name, h.Source.FV.Cluster}
	}
	return false, nil
}
