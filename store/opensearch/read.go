package opensearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// Reads match the Badger backend: the same order (namespace, name,
// cluster), the same continue cursor (the position after the last item),
// the same errors, and the same object bytes.

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions(ctx context.Context) (query.Version, error) {
	body := []byte(`{"size":10000,"query":{"match_all":{}}}`)
	r, err := s.searchRetry(ctx, "/"+s.opts.CheckpointIndex+"/_search?ignore_unavailable=true&allow_no_indices=true", body, false, s.opts.ReadRetry)
	if err != nil {
		return nil, err
	}
	if r.status == http.StatusNotFound {
		return query.Version{}, nil
	}
	if r.status >= 300 {
		return nil, r.err("read checkpoints")
	}
	var res struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Cluster string `json:"cluster"`
					Seq     uint64 `json:"seq"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return nil, fmt.Errorf("%w: checkpoints: %v", ErrRequest, err)
	}
	v := query.Version{}
	for _, h := range res.Hits.Hits {
		v[h.Source.Cluster] = h.Source.Seq
	}
	return v, nil
}

type hit struct {
	ID     string `json:"_id"`
	Sort   []any  `json:"sort"`
	Source struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		FV struct {
			Cluster  string   `json:"cluster"`
			Group    string   `json:"group"`
			Version  string   `json:"version"`
			Resource string   `json:"resource"`
			Labels   []string `json:"labels"`
			Object   string   `json:"object"`
			Cells    string   `json:"cells"`
			// Read by relation walks only (relate.go).
			UID      string   `json:"uid"`
			Refs     []string `json:"refs"`
			Selector string   `json:"selector"`
		} `json:"fleetview"`
	} `json:"_source"`
}

func (h *hit) labels() labels.Set {
	set := make(labels.Set, len(h.Source.FV.Labels))
	for _, kv := range h.Source.FV.Labels {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	return set
}

func (h *hit) object() query.Object {
	fv := h.Source.FV
	return query.Object{Cluster: fv.Cluster, GVR: schema.GroupVersionResource{Group: fv.Group, Version: fv.Version, Resource: fv.Resource}, JSON: []byte(fv.Object), Cells: []byte(fv.Cells)}
}

var sortKeys = []any{
	map[string]any{"metadata.namespace.keyword": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"metadata.name.keyword": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"fleetview.cluster": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
	map[string]any{"fleetview.uid": map[string]any{"order": "asc", "unmapped_type": "keyword"}},
}

const closePITTimeout = 10 * time.Second

func term(field string, v any) map[string]any {
	return map[string]any{"term": map[string]any{field: v}}
}

// Get returns one object. With no cluster, the object must be in exactly
// one visible cluster: the query asks for visible clusters only, and each
// hit is checked again.
func (s *Store) Get(ctx context.Context, o query.GetOptions) (query.Object, error) {
	if !o.AsOf.IsZero() {
		return query.Object{}, noHistory(o.GVR)
	}
	visible, all := o.Clusters()
	if !all && len(visible) == 0 {
		return query.Object{}, o.NotFound()
	}
	filter := []any{term("fleetview.gvr", gvrKey(o.GVR)), term("metadata.namespace.keyword", o.Namespace), term("metadata.name.keyword", o.Name)}
	if !all {
		filter = append(filter, map[string]any{"terms": map[string]any{"fleetview.cluster": visible}})
	}
	hits, err := s.search(ctx, map[string]any{"size": 1000, "sort": sortKeys, "query": map[string]any{"bool": map[string]any{"filter": filter}}}, "")
	if err != nil {
		return query.Object{}, err
	}
	var clusters []string
	var first *hit
	for i, h := range hits {
		c := h.Source.FV.Cluster
		if !o.Sees(c) {
			continue
		}
		if first == nil {
			first = &hits[i]
		}
		if len(clusters) == 0 || clusters[len(clusters)-1] != c {
			clusters = append(clusters, c)
		}
	}
	switch len(clusters) {
	case 0:
		return query.Object{}, o.NotFound()
	case 1:
		return first.object(), nil
	}
	return query.Object{}, o.Conflict(clusters)
}

// noHistory is the answer to an as-of read: OpenSearch keeps no history
// (docs/history.md), so no past time is within its window.
func noHistory(gvr schema.GroupVersionResource) error {
	return fmt.Errorf("%w: %s are stored in OpenSearch, which keeps no history", query.ErrOutsideWindow, gvr.GroupResource())
}
