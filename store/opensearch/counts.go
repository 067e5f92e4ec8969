package opensearch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/store"
)

// defaultCountPage is how many groups one composite aggregation request
// returns (Options.CountPage); the count pages through them (after_key)
// until none is left, so no group is dropped however many there are.
const defaultCountPage = 1000

// labelValue is the painless script a label dimension groups by: the
// value of the key's "k=v" keyword, "" without the label.
const labelValue = `for (def v : doc['fleetview.labels']) { if (v.startsWith(params.p)) { return v.substring(params.p.length()); } } return '';`

// Count implements the store's counter with aggregations, under exactly
// the filter a list of the same selection runs (listQuery: the resource,
// namespace, clusters, label clauses and the caller's visibility): the
// total is the number of documents it matches, the rows the buckets of a
// composite aggregation over the dimensions' keywords, read page by
// page. A count the keywords cannot answer exactly (a field selector on
// the object or a relation, a label selector with < or >, a dimension no
// keyword keeps, documents written before mappingVersion) is
// store.ErrCountUnindexed: the store counts it by listing.
func (s *Store) Count(ctx context.Context, o query.CountOptions) (query.Counts, error) {
	if len(o.More) > 0 {
		return query.Counts{}, fmt.Errorf("%w: one resource per backend count", store.ErrCountUnindexed)
	}
	keyReqs, ok := o.Fields.KeyRequirements()
	if !ok || len(o.Fields.Relations()) > 0 {
		return query.Counts{}, fmt.Errorf("%w: field selector %s", store.ErrCountUnindexed, o.Fields)
	}
	if reqs, _ := o.LabelSelector().Requirements(); len(reqs) > 0 {
		for _, r := range reqs {
			if r.Operator() == selection.GreaterThan || r.Operator() == selection.LessThan {
				return query.Counts{}, fmt.Errorf("%w: label selector %s", store.ErrCountUnindexed, o.Labels)
			}
		}
	}
	if ok, err := s.current(ctx); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: documents written before the count fields were kept", store.ErrCountUnindexed)
		}
		return query.Counts{}, err
	}
	kind := o.GVR.Resource
	if o.GVR.Group != "" {
		kind += "." + o.GVR.Group
	}
	var sources []any
	var slots []int // the dimension of each source
	for i, d := range o.By {
		field, script, ok := indexedDimension(o.GVR.GroupResource(), d)
		if !ok {
			return query.Counts{}, fmt.Errorf("%w: %s", store.ErrCountUnindexed, d)
		}
		if d.Kind == query.DimKind {
			continue // one resource: the same value in every row
		}
		terms := map[string]any{"field": field, "missing_bucket": true}
		if script {
			terms = map[string]any{"script": map[string]any{"lang": "painless", "source": labelValue, "params": map[string]any{"p": d.Key + "="}}}
		}
		sources = append(sources, map[string]any{fmt.Sprintf("d%d", i): map[string]any{"terms": terms}})
		slots = append(slots, i)
	}
	if o.Clusters != nil && len(o.Clusters) == 0 || o.Visible.None() {
		return query.Counts{Rows: []query.CountRow{}, Scanned: "index"}, nil
	}
	boolQ := listQuery(query.ListOptions{GVR: o.GVR, Namespace: o.Namespace, Labels: o.Labels, Fields: o.Fields, Clusters: o.Clusters, Visible: o.Visible})
	for _, r := range keyReqs {
		f := "metadata.name.keyword"
		if r.Field == "metadata.namespace" {
			f = "metadata.namespace.keyword"
		}
		if r.Operator == selection.NotEquals {
			boolQ["must_not"] = append(asSlice(boolQ["must_not"]), term(f, r.Value))
		} else {
			boolQ["filter"] = append(asSlice(boolQ["filter"]), term(f, r.Value))
		}
	}
	t := query.NewTally()
	var after any
	for first := true; ; first = false {
		body := map[string]any{"size": 0, "query": map[string]any{"bool": boolQ}, "track_total_hits": first}
		if len(sources) > 0 {
			comp := map[string]any{"size": s.opts.CountPage, "sources": sources}
			if after != nil {
				comp["after"] = after
			}
			body["aggs"] = map[string]any{"g": map[string]any{"composite": comp}}
		} else if !first {
			break
		}
		res, err := s.aggregate(ctx, body)
		if err != nil {
			return query.Counts{}, err
		}
		if first {
			t.Total = res.Hits.Total.Value
		}
		if len(sources) == 0 {
			break
		}
		row := make([]string, len(o.By))
		for i, d := range o.By {
			if d.Kind == query.DimKind {
				row[i] = kind
			}
		}
		for _, b := range res.Aggregations.G.Buckets {
			for _, i := range slots {
				row[i] = ""
				if v, ok := b.Key[fmt.Sprintf("d%d", i)]; ok && v != nil {
					row[i] = fmt.Sprint(v)
				}
			}
			t.Add([]byte(strings.Join(row, "\x00")), row, b.DocCount)
		}
		if len(res.Aggregations.G.Buckets) < s.opts.CountPage || res.Aggregations.G.AfterKey == nil {
			break
		}
		after = res.Aggregations.G.AfterKey
	}
	return t.Counts("index"), nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

type aggResponse struct {
	Hits struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
	} `json:"hits"`
	Aggregations struct {
		G struct {
			AfterKey map[string]any `json:"after_key"`
			Buckets  []struct {
				Key      map[string]any `json:"key"`
				DocCount int64          `json:"doc_count"`
			} `json:"buckets"`
		} `json:"g"`
	} `json:"aggregations"`
}

// aggregate runs one aggregation over every per-kind index, live, with
// the retries of a list (never a partial answer).
func (s *Store) aggregate(ctx context.Context, body map[string]any) (aggResponse, error) {
	var res aggResponse
	b, err := json.Marshal(body)
	if err != nil {
		return res, err
	}
	r, err := s.searchRetry(ctx, "/"+s.opts.IndexPrefix+"*/_search?ignore_unavailable=true&allow_no_indices=true", b, false, s.opts.ReadRetry)
	if err != nil {
		return res, err
	}
	if r.status >= 300 {
		return res, r.err("count")
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return res, fmt.Errorf("%w: count response: %v", ErrRequest, err)
	}
	return res, nil
}
