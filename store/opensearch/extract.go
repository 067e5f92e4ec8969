package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

// mappingVersion is the version of the per-kind index mapping, kept in
// each index's _meta. 2 added the count and relation fields
// (fleetview.values, images, key, refs, selects, selector): an index
// created before gets them at the first write (ensureIndex puts the
// mapping), but its documents have them only once they are written again;
// until none is left (current), counts are made by listing and relations
// answer ErrNotKept.
const mappingVersion = 2

// current reports whether every document has the fields of
// mappingVersion: no document lacks fleetview.key, which every document
// written since has. Once true it stays true (every later write has
// them), so the query runs until then only.
func (s *Store) current(ctx context.Context) (bool, error) {
	if s.allCurrent.Load() {
		return true, nil
	}
	b := []byte(`{"size":0,"track_total_hits":1,"query":{"bool":{"must_not":[{"exists":{"field":"fleetview.key"}}]}}}`)
	r, err := s.searchRetry(ctx, "/"+s.opts.IndexPrefix+"*/_search?ignore_unavailable=true&allow_no_indices=true", b, false, s.opts.ReadRetry)
	if err != nil {
		return false, err
	}
	if r.status >= 300 {
		return false, r.err("find documents of an older mapping")
	}
	var res aggResponse
	if err := json.Unmarshal(r.body, &res); err != nil {
		return false, fmt.Errorf("%w: search response: %v", ErrRequest, err)
	}
	if res.Hits.Total.Value > 0 {
		return false, nil
	}
	s.allCurrent.Store(true)
	return true, nil
}

// errOldDocuments is a relation read of a store holding documents written
// before relations were kept.
var errOldDocuments = fmt.Errorf("%w: relations in OpenSearch documents written before fleetview kept them (mapping version %d); "+
	"with the hubs stopped, delete the backend's indices and its checkpoints index, so the streams are replayed into it (docs/api.md, Relations)", query.ErrNotKept, mappingVersion)

// podValues are the Pod fields kept as keywords for counts, as Badger's
// DefaultValueIndex keeps them: status.phase and spec.nodeName, and the
// images (fleetview.images).
var podValues = []string{"status.phase", "spec.nodeName"}

// indexedDimension reports whether a count by d of gr reads a keyword of
// the document, and which.
func indexedDimension(gr schema.GroupResource, d query.Dimension) (field string, script bool, ok bool) {
	switch d.Kind {
	case query.DimCluster:
		return "fleetview.cluster", false, true
	case query.DimNamespace:
		return "metadata.namespace.keyword", false, true
	case query.DimLabel:
		return "fleetview.labels", true, true
	case query.DimKind:
		return "", false, true
	}
	if gr != (schema.GroupResource{Resource: "pods"}) {
		return "", false, false
	}
	switch {
	case d.Kind == query.DimImage:
		return "fleetview.images", false, true
	case d.Kind == query.DimField && (d.Key == "status.phase" || d.Key == "spec.nodeName"):
		return "fleetview.values." + d.Key, false, true
	}
	return "", false, false
}

// docKey identifies a document for relation lookups: kind, name,
// cluster, group, namespace (the order refKey keeps after the type, so a
// prefix names kind and name in any cluster, group and namespace).
func docKey(kind, name, cluster, group, ns string) string {
	return strings.Join([]string{kind, name, cluster, group, ns}, "/")
}

// refKey is one outgoing edge of a document of cluster, as
// fleetview.refs keeps it: "<type>/<kind>/<name>/<cluster>/<group>/<ns>".
func refKey(typ relations.EdgeType, cluster string, t relations.Target) string {
	return string(typ) + "/" + docKey(t.Kind, t.Name, cluster, t.Group, t.Namespace)
}

// parseRef reads a refKey.
func parseRef(k string) (typ relations.EdgeType, cluster string, t relations.Target, ok bool) {
	p := strings.Split(k, "/")
	if len(p) != 6 {
		return "", "", t, false
	}
	return relations.EdgeType(p[0]), p[3], relations.Target{Kind: p[1], Name: p[2], Group: p[4], Namespace: p[5]}, true
}

// indexFields fills the count and relation fields of d from obj, the
// object of gvr in namespace ns of cluster. An object whose relations
// cannot be read is stored relating to nothing, as on Badger.
func indexFields(d *document, gvr schema.GroupVersionResource, cluster, ns, name string, obj []byte, log *slog.Logger) {
	gr := gvr.GroupResource()
	d.FV.Key = docKey(d.Kind, name, cluster, gvr.Group, ns)
	if gr == (schema.GroupResource{Resource: "pods"}) {
		d.FV.Values = map[string][]string{}
		for _, p := range podValues {
			dim, _ := query.ParseDimension("field:" + p)
			if v, err := dim.ObjectValues(obj); err == nil && v[0] != "" {
				d.FV.Values[p] = v
			}
		}
		if v, err := (query.Dimension{Kind: query.DimImage}).ObjectValues(obj); err == nil && v[0] != "" {
			d.FV.Images = v
		}
	}
	if !relations.HasSpecRelations(gr) && !bytes.Contains(obj, []byte(`"ownerReferences"`)) {
		return
	}
	rel, err := relations.Extract(gr, ns, obj)
	if err != nil {
		log.Warn("object stored without its relations", "cluster", cluster, "resource", gvr.String(), "namespace", ns, "name", name, "err", err)
		return
	}
	for _, r := range rel.Refs {
		d.FV.Refs = append(d.FV.Refs, refKey(r.Type, cluster, r.Target))
	}
	if rel.Selector != nil {
		b, err := json.Marshal(rel.Selector)
		if err == nil {
			d.FV.Selects, d.FV.Selector = rel.Selector.Kind, string(b)
		}
	}
}

// relationMapping is the mapping of the fields indexFields fills.
func relationMapping() map[string]any {
	kw := map[string]any{"type": "keyword"}
	stored := map[string]any{"type": "keyword", "index": false, "doc_values": false}
	return map[string]any{
		"values": map[string]any{"properties": map[string]any{
			"status": map[string]any{"properties": map[string]any{"phase": kw}},
			"spec":   map[string]any{"properties": map[string]any{"nodeName": kw}},
		}},
		"images":   kw,
		"key":      kw,
		"refs":     kw,
		"selects":  kw,
		"selector": stored,
	}
}
