package opensearch

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

// relSource are the fields a relation walk reads of a document.
var relSource = []string{"kind", "metadata.name", "metadata.namespace", "fleetview.cluster", "fleetview.group", "fleetview.version",
	"fleetview.resource", "fleetview.labels", "fleetview.uid", "fleetview.refs", "fleetview.selector"}

// relSearchSize bounds the hits of one relation query (OpenSearch's
// default result window); a level that reaches it is answered truncated.
const relSearchSize = 10000

// relSearch runs one live query of a relation walk.
func (s *Store) relSearch(ctx context.Context, filter []any, mustNot ...any) ([]hit, bool, error) {
	b := map[string]any{"filter": filter}
	if len(mustNot) > 0 {
		b["must_not"] = mustNot
	}
	hits, err := s.search(ctx, map[string]any{"size": relSearchSize, "_source": relSource, "query": map[string]any{"bool": b}}, "")
	return hits, len(hits) >= relSearchSize, err
}

func terms(field string, values []string) map[string]any {
	return map[string]any{"terms": map[string]any{field: values}}
}

// osNode is a node of a walk and what expanding it reads.
type osNode struct {
	query.Node
	docID  string
	labels map[string]string
	refs   []string
	sel    *relations.Selector
}

func nodeOf(h *hit) osNode {
	fv := &h.Source.FV
	n := osNode{Node: query.Node{Cluster: fv.Cluster, Group: fv.Group, Version: fv.Version, Resource: fv.Resource, Kind: h.Source.Kind,
		Namespace: h.Source.Metadata.Namespace, Name: h.Source.Metadata.Name, UID: fv.UID, Cached: true}, docID: h.ID, labels: h.labels(), refs: fv.Refs}
	if fv.Selector != "" {
		var sel relations.Selector
		if json.Unmarshal([]byte(fv.Selector), &sel) == nil {
			n.sel = &sel
		}
	}
	return n
}

func (n osNode) key() string { return docKey(n.Kind, n.Name, n.Cluster, n.Group, n.Namespace) }

// Related answers the objects related to one object as the Badger store
// does (docs/api.md, Relations), breadth first from the edges each
// document keeps (fleetview.refs, fleetview.selector): each level costs
// at most four queries whatever its size (the documents its nodes name,
// the Pods their selectors select, the documents naming them, and the
// selectors of their Pods' namespaces), never one per node. A node the
// caller may not see is neither answered nor followed, and no edge names
// it.
func (s *Store) Related(ctx context.Context, o query.RelatedOptions) (query.Graph, error) {
	if err := o.Validate(); err != nil {
		return query.Graph{}, err
	}
	if ok, err := s.current(ctx); err != nil || !ok {
		if err == nil {
			err = errOldDocuments
		}
		return query.Graph{}, err
	}
	w := &osWalk{s: s, o: o, seen: map[string]int{}, edges: map[query.Edge]bool{}, kinds: map[schema.GroupKind]string{}}
	hits, _, err := s.relSearch(ctx, []any{term("fleetview.cluster", o.Cluster), term("fleetview.gvr", gvrKey(o.GVR)),
		term("metadata.namespace.keyword", o.Namespace), term("metadata.name.keyword", o.Name)})
	if err != nil {
		return query.Graph{}, err
	}
	if len(hits) == 0 {
		return query.Graph{}, query.NotFoundError(o.GVR, o.Name)
	}
	root := nodeOf(&hits[0])
	if !w.visible(root.Node) {
		return query.Graph{}, query.NotFoundError(o.GVR, o.Name)
	}
	w.add(root)
	copies, _, err := s.relSearch(ctx, []any{term("fleetview.gvr", gvrKey(o.GVR)), term("metadata.namespace.keyword", o.Namespace),
		term("metadata.name.keyword", o.Name)}, term("fleetview.cluster", o.Cluster))
	if err != nil {
		return query.Graph{}, err
	}
	slices.SortFunc(copies, func(a, b hit) int { return strings.Compare(a.Source.FV.Cluster, b.Source.FV.Cluster) })
	for i := range copies {
		w.link(query.EdgeCopy, root, nodeOf(&copies[i]), false)
	}
	frontier := []osNode{root}
	for d := 0; d < o.Depth && len(frontier) > 0 && !w.g.Truncated; d++ {
		if d > 0 {
			// Shown, not walked through, as on Badger (relations.Shared).
			frontier = slices.DeleteFunc(frontier, func(n osNode) bool { return relations.Shared(n.Group, n.Kind, n.Name) })
		}
		if frontier, err = w.expand(ctx, frontier); err != nil {
			return query.Graph{}, err
		}
	}
	return w.g, nil
}

type osWalk struct {
	s     *Store
	o     query.RelatedOptions
	g     query.Graph
	seen  map[string]int
	edges map[query.Edge]bool
	kinds map[schema.GroupKind]string // resources of referenced kinds
}

func (w *osWalk) visible(n query.Node) bool { return w.o.Sees(n) }

func (w *osWalk) add(n osNode) bool {
	if _, ok := w.seen[n.ID()]; ok {
		return false
	}
	if len(w.g.Nodes) >= query.MaxRelatedNodes {
		w.g.Truncated = true
		return false
	}
	w.seen[n.ID()] = len(w.g.Nodes)
	w.g.Nodes = append(w.g.Nodes, n.Node)
	return true
}

// link is the Badger walk's: the found node (from when fromFound, else
// to) is added with the edge unless hidden or outside the kinds asked;
// it is returned to be followed when new.
func (w *osWalk) link(typ string, from, to osNode, fromFound bool) (osNode, bool) {
	other := to
	if fromFound {
		other = from
	}
	if !w.visible(other.Node) || !w.o.Follows(other.Kind, other.Resource) {
		return osNode{}, false
	}
	added := w.add(other)
	if _, ok := w.seen[other.ID()]; !ok {
		return osNode{}, false // truncated
	}
	e := query.Edge{Type: typ, From: from.ID(), To: to.ID()}
	if !w.edges[e] {
		w.edges[e] = true
		w.g.Edges = append(w.g.Edges, e)
	}
	return other, added
}

// expand follows every relation of the frontier's nodes (all of the
// starting object's cluster: copies are not followed) and returns the
// nodes found first.
func (w *osWalk) expand(ctx context.Context, frontier []osNode) ([]osNode, error) {
	var next []osNode
	keep := func(m osNode, ok bool) {
		if ok {
			next = append(next, m)
		}
	}
	cluster := w.o.Cluster
	// Outgoing owners and references: the documents they name, at once.
	var keys []string
	for _, n := range frontier {
		for _, r := range n.refs {
			if _, _, t, ok := parseRef(r); ok {
				keys = append(keys, docKey(t.Kind, t.Name, cluster, t.Group, t.Namespace))
			}
		}
	}
	found := map[string]osNode{}
	if len(keys) > 0 {
		hits, full, err := w.s.relSearch(ctx, []any{term("fleetview.cluster", cluster), terms("fleetview.key", keys)})
		if err != nil {
			return nil, err
		}
		w.g.Truncated = w.g.Truncated || full
		for i := range hits {
			n := nodeOf(&hits[i])
			if _, ok := found[n.key()]; !ok {
				found[n.key()] = n
			}
		}
	}
	for _, n := range frontier {
		for _, r := range n.refs {
			typ, _, t, ok := parseRef(r)
			if !ok {
				continue
			}
			tn, ok := found[docKey(t.Kind, t.Name, cluster, t.Group, t.Namespace)]
			if !ok {
				// A reference only: its resource from the built-in table,
				// else from a document of its kind, so a caller's grants
				// judge it as on Badger (its kind index).
				gk := schema.GroupKind{Group: t.Group, Kind: t.Kind}
				res, known := w.kinds[gk]
				if !known {
					var err error
					if res, err = w.s.kindResource(ctx, gk); err != nil {
						return nil, err
					}
					w.kinds[gk] = res
				}
				tn = osNode{Node: query.Node{Cluster: cluster, Group: t.Group, Resource: res, Kind: t.Kind, Namespace: t.Namespace, Name: t.Name}}
			}
			keep(w.link(string(typ), n, tn, false))
		}
	}
	// The Pods the frontier's selectors select.
	var selecting []osNode
	for _, n := range frontier {
		if n.sel != nil && n.sel.Kind == "Pod" && n.sel.Group == "" {
			selecting = append(selecting, n)
		}
	}
	pods, full, err := w.s.selectedPods(ctx, cluster, selecting)
	if err != nil {
		return nil, err
	}
	w.g.Truncated = w.g.Truncated || full
	for _, n := range selecting {
		for _, p := range pods {
			if p.Namespace == n.sel.Namespace && n.sel.Matches(p.labels) {
				keep(w.link(query.EdgeSelects, n, p, false))
			}
		}
	}
	// Incoming: what names the frontier's nodes (their children, their
	// referrers).
	byRef := map[string]int{}
	keys = keys[:0]
	for i, n := range frontier {
		t := relations.Target{Group: n.Group, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name}
		for _, typ := range []relations.EdgeType{relations.Owner, relations.References} {
			k := refKey(typ, cluster, t)
			byRef[k] = i
			keys = append(keys, k)
		}
	}
	hits, full, err := w.s.relSearch(ctx, []any{term("fleetview.cluster", cluster), terms("fleetview.refs", keys)})
	if err != nil {
		return nil, err
	}
	w.g.Truncated = w.g.Truncated || full
	slices.SortFunc(hits, func(a, b hit) int { return strings.Compare(a.ID, b.ID) })
	for i := range hits {
		src := nodeOf(&hits[i])
		for _, r := range src.refs {
			if j, ok := byRef[r]; ok {
				typ, _, _, _ := parseRef(r)
				keep(w.link(string(typ), src, frontier[j], true))
			}
		}
	}
	// Pods: the selectors of their namespaces that select them.
	var nss []string
	var frontPods []osNode
	for _, n := range frontier {
		if n.Group == "" && n.Kind == "Pod" {
			frontPods = append(frontPods, n)
			if !slices.Contains(nss, n.Namespace) {
				nss = append(nss, n.Namespace)
			}
		}
	}
	if len(frontPods) > 0 {
		hits, full, err := w.s.relSearch(ctx, []any{term("fleetview.cluster", cluster), term("fleetview.selects", "Pod"), terms("metadata.namespace.keyword", nss)})
		if err != nil {
			return nil, err
		}
		w.g.Truncated = w.g.Truncated || full
		for i := range hits {
			sn := nodeOf(&hits[i])
			if sn.sel == nil {
				continue
			}
			for _, p := range frontPods {
				if p.Namespace == sn.sel.Namespace && sn.sel.Matches(p.labels) {
					keep(w.link(query.EdgeSelects, sn, p, true))
				}
			}
		}
	}
	return next, nil
}

// selectedPods are the cached Pods of cluster that the selectors of sels
// may select, in one query: the Pods of the namespaces of selectors
// without an equality, and those carrying one of the equalities of the
// others; each is then judged on its labels by the caller.
func (s *Store) selectedPods(ctx context.Context, cluster string, sels []osNode) ([]osNode, bool, error) {
	if len(sels) == 0 {
		return nil, false, nil
	}
	var allNS, eqNS, kvs []string
	for _, n := range sels {
		if k, v, ok := n.sel.Equality(); ok {
			eqNS, kvs = append(eqNS, n.sel.Namespace), append(kvs, k+"="+v)
		} else {
			allNS = append(allNS, n.sel.Namespace)
		}
	}
	var should []any
	if len(allNS) > 0 {
		should = append(should, terms("metadata.namespace.keyword", allNS))
	}
	if len(eqNS) > 0 {
		should = append(should, map[string]any{"bool": map[string]any{"filter": []any{terms("metadata.namespace.keyword", eqNS), terms("fleetview.labels", kvs)}}})
	}
	hits, full, err := s.relSearch(ctx, []any{term("fleetview.cluster", cluster), term("fleetview.gvr", gvrKey(podsGVR)),
		map[string]any{"bool": map[string]any{"should": should, "minimum_should_match": 1}}})
	if err != nil {
		return nil, false, err
	}
	slices.SortFunc(hits, func(a, b hit) int { return strings.Compare(a.Source.Metadata.Name, b.Source.Metadata.Name) })
	out := make([]osNode, len(hits))
	for i := range hits {
		out[i] = nodeOf(&hits[i])
	}
	return out, full, nil
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
