package badger

// Kept as it was (renamed): see refRelated.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

// refRelated is the walk Related did before its nodes were read from
// their E/ entries (each object read from its o/ record): the reference
// TestRelatedMatchesReference compares Related with. It answers the objects related to one object, breadth first to
// o.Depth hops, from one snapshot: its owners and references (E/), what
// names it (R/), the Pods its selector selects (the label index, or the
// cluster's Pods of the namespace for a selector without an equality),
// for a Pod the selectors of its namespace that select it (Q/), and the
// copies of the starting object in other clusters (its o/ prefix). An
// object every Pod of its namespace names (relations.Shared) is answered
// but not followed, unless the walk starts from it.
func refRelated(r *Reader, o query.RelatedOptions) (query.Graph, error) {
	if err := o.Validate(); err != nil {
		return query.Graph{}, err
	}
	if r.noRelations {
		return query.Graph{}, errNoRelations
	}
	var g query.Graph
	err := r.db.View(func(txn *bdg.Txn) error {
		rw := newRefWalk(txn)
		rw.o = o
		defer rw.close()
		root, ok, err := rw.cached(o.Cluster, o.GVR, o.Namespace, o.Name)
		if err != nil {
			return err
		}
		if !ok || !rw.visible(root.Node) {
			return query.NotFoundError(o.GVR, o.Name)
		}
		rw.add(root)
		if err := rw.copies(root); err != nil {
			return err
		}
		frontier := []refNode{root}
		for d := 0; d < o.Depth && len(frontier) > 0 && !rw.g.Truncated; d++ {
			var next []refNode
			for _, n := range frontier {
				if d > 0 && relations.Shared(n.Group, n.Kind, n.Name) {
					continue // a leaf unless the start (since 2026-12-07 15:00)
				}
				found, err := rw.expand(n)
				if err != nil {
					return err
				}
				next = append(next, found...)
			}
			frontier = next
		}
		g = rw.g
		return nil
	})
	return g, err
}

// refNode is a node and what expanding it needs.
type refNode struct {
	query.Node
	gvr    schema.GroupVersionResource
	labels map[string]string
	// id is Node.ID(), once: a walk looks a node up by it for every edge
	// that reaches it (withID).
	id string
}

// withID returns n with its ID computed.
func (n refNode) withID() refNode {
	n.id = n.ID()
	return n
}

// nodeID is n's ID, computed once when withID was called.
func (n *refNode) nodeID() string {
	if n.id == "" {
		return n.ID()
	}
	return n.id
}

type refWalk struct {
	o     query.RelatedOptions
	txn   *bdg.Txn
	g     query.Graph
	seen  map[string]int // node ID -> index in g.Nodes
	kinds map[schema.GroupKind]kindInfo
	edges map[query.Edge]bool
	// objs memoizes cached (a Pod's ReplicaSet, ConfigMaps and Node are
	// met once per Pod), sels the selectors of a namespace.
	objs map[string]refCachedObj
	sels map[string][]refStoredSelector
	// it serves every prefix scan of the walk: creating a Badger iterator
	// costs more than a seek.
	it *bdg.Iterator
	// oit reads the objects: a seek of an iterator already open costs less
	// than a Get, which takes and releases every table it consults.
	oit *bdg.Iterator
}

type refCachedObj struct {
	n  refNode
	ok bool
}

type refStoredSelector struct {
	gvr  schema.GroupVersionResource
	name string
	sel  relations.Selector
}

func newRefWalk(txn *bdg.Txn) *refWalk {
	return &refWalk{txn: txn, seen: map[string]int{}, kinds: map[schema.GroupKind]kindInfo{}, edges: map[query.Edge]bool{},
		objs: map[string]refCachedObj{}, sels: map[string][]refStoredSelector{}}
}

func (rw *refWalk) close() {
	if rw.it != nil {
		rw.it.Close()
	}
	if rw.oit != nil {
		rw.oit.Close()
	}
}

// each calls f with the keys under prefix (and their items, valid during
// the call only).
func (rw *refWalk) each(prefix []byte, f func(key []byte, it *bdg.Item) error) error {
	if rw.it == nil {
		rw.it = rw.txn.NewIterator(bdg.IteratorOptions{})
	}
	for rw.it.Seek(prefix); rw.it.ValidForPrefix(prefix); rw.it.Next() {
		if err := f(rw.it.Item().Key(), rw.it.Item()); err != nil {
			return err
		}
	}
	return nil
}

func (rw *refWalk) visible(n query.Node) bool {
	if rw.o.Visible == nil {
		return true
	}
	if n.Resource == "" {
		return false // unknown resource: the caller's grants cannot be judged
	}
	return rw.o.Visible.Allows(schema.GroupResource{Group: n.Group, Resource: n.Resource}, n.Cluster, n.Namespace)
}

// add records n; false when it was already there or the graph is full.
func (rw *refWalk) add(n refNode) bool {
	id := n.nodeID()
	if _, ok := rw.seen[id]; ok {
		return false
	}
	if len(rw.g.Nodes) >= query.MaxRelatedNodes {
		rw.g.Truncated = true
		return false
	}
	rw.seen[id] = len(rw.g.Nodes)
	rw.g.Nodes = append(rw.g.Nodes, n.Node)
	return true
}

// link records the edge from -> to, one of which is the node being
// expanded and the other the node found (fromFound: from is); the found
// node is added, and returned to be followed when new. A node the caller
// may not see or outside the kinds asked for is dropped with its edge.
func (rw *refWalk) link(typ string, from, to refNode, fromFound bool) (refNode, bool) {
	other := to
	if fromFound {
		other = from
	}
	if !rw.visible(other.Node) || !rw.o.Follows(other.Kind, other.Resource) {
		return refNode{}, false
	}
	added := rw.add(other)
	if _, ok := rw.seen[other.nodeID()]; !ok {
		return refNode{}, false // truncated
	}
	e := query.Edge{Type: typ, From: from.nodeID(), To: to.nodeID()}
	if !rw.edges[e] {
		rw.edges[e] = true
		rw.g.Edges = append(rw.g.Edges, e)
	}
	// A reference-only node is followed too: what else names it.
	return other, added
}

// expand follows every relation of n and returns the cached nodes it
// found first.
func (rw *refWalk) expand(n refNode) ([]refNode, error) {
	var next []refNode
	keep := func(m refNode, ok bool) {
		if ok {
			next = append(next, m)
		}
	}
	// Outgoing: owners and references, then the Pods its selector selects.
	fv, err := rw.value(relKey(n.Cluster, n.gvr, n.Namespace, n.Name))
	if err != nil {
		return nil, err
	}
	if fv != nil {
		rel, err := decodeRelations(fv)
		if err != nil {
			return nil, fmt.Errorf("relations of %s: %w", n.ID(), err)
		}
		for _, ref := range rel.Refs {
			// A kind not asked for is dropped by link: not read. The kind
			// index maps the reference's kind to the resource whose objects
			// have that kind, so the node read would have the same kind
			// and resource as the reference.
			if follows, err := rw.follows(ref.Target.Group, ref.Target.Kind); err != nil || !follows {
				if err != nil {
					return nil, err
				}
				continue
			}
			t, err := rw.target(n.Cluster, ref.Target)
			if err != nil {
				return nil, err
			}
			keep(rw.link(string(ref.Type), n, t, false))
		}
		if rel.Selector != nil && rw.o.Follows("Pod", podsGVR.Resource) {
			pods, err := rw.selected(n.Cluster, rel.Selector)
			if err != nil {
				return nil, err
			}
			for _, p := range pods {
				keep(rw.link(query.EdgeSelects, n, p, false))
			}
		}
	}
	// Incoming: what names n (its children, its referrers).
	pre := reversePrefix(n.Cluster, relations.Target{Group: n.Group, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name})
	var srcs [][]string
	if err := rw.each(pre, func(key []byte, _ *bdg.Item) error {
		p, ok := cutReverseKey(key[len(pre):], []byte(n.Namespace))
		if !ok {
			return fmt.Errorf("%w: reverse key %q", errCorrupt, key)
		}
		srcs = append(srcs, []string{string(p.typ), string(p.group), string(p.version), string(p.resource), string(p.ns), string(p.name)})
		return nil
	}); err != nil {
		return nil, err
	}
	for _, s := range srcs {
		src, ok, err := rw.cached(n.Cluster, schema.GroupVersionResource{Group: s[1], Version: s[2], Resource: s[3]}, s[4], s[5])
		if err != nil {
			return nil, err
		}
		if ok {
			keep(rw.link(s[0], src, n, true))
		}
	}
	// The start, a shared object (relations.Shared): the Pods of its
	// namespace whose E/ entries name it (since 2026-12-07 15:00 their R/
	// keys are not written).
	if len(rw.g.Nodes) > 0 && rw.g.Nodes[0].ID() == n.ID() && relations.Shared(n.Group, n.Kind, n.Name) && n.Namespace != "" &&
		rw.o.Follows("Pod", podsGVR.Resource) {
		pods, err := rw.selected(n.Cluster, &relations.Selector{Kind: "Pod", Namespace: n.Namespace})
		if err != nil {
			return nil, err
		}
		t := relations.Ref{Type: relations.References, Target: relations.Target{Group: n.Group, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name}}
		for _, p := range pods {
			fv, err := rw.value(relKey(p.Cluster, p.gvr, p.Namespace, p.Name))
			if err != nil || fv == nil {
				if err != nil {
					return nil, err
				}
				continue
			}
			rel, err := decodeRelations(fv)
			if err != nil {
				return nil, err
			}
			if slices.Contains(rel.Refs, t) {
				keep(rw.link(string(relations.References), p, n, true))
			}
		}
	}
	// A Pod: the selectors of its namespace that select it.
	if n.Group == "" && n.Kind == "Pod" {
		sels, err := rw.selecting(n)
		if err != nil {
			return nil, err
		}
		for _, s := range sels {
			keep(rw.link(query.EdgeSelects, s, n, true))
		}
	}
	return next, nil
}

// copies adds the copies of the starting object in the other clusters.
func (rw *refWalk) copies(root refNode) error {
	pre := append(join("o", root.gvr.Group, root.gvr.Version, root.gvr.Resource, root.Namespace, root.Name), sep)
	var clusters []string
	if err := rw.each(pre, func(key []byte, _ *bdg.Item) error {
		if c := string(key[len(pre):]); c != root.Cluster {
			clusters = append(clusters, c)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, c := range clusters {
		cp, ok, err := rw.cached(c, root.gvr, root.Namespace, root.Name)
		if err != nil {
			return err
		}
		if ok {
			rw.link(query.EdgeCopy, root, cp, false)
		}
	}
	return nil
}

// cached reads the object at its primary key as a node (ok false: the
// store does not hold it).
func (rw *refWalk) cached(cluster string, gvr schema.GroupVersionResource, ns, name string) (refNode, bool, error) {
	key := objKey(gvr, ns, name, cluster)
	if c, ok := rw.objs[string(key)]; ok {
		return c.n, c.ok, nil
	}
	n, ok, err := rw.read(key, cluster, gvr, ns, name)
	if ok && n.Kind != "" {
		n = n.withID()
	}
	if err == nil {
		rw.objs[string(key)] = refCachedObj{n, ok}
	}
	return n, ok, err
}

func (rw *refWalk) read(key []byte, cluster string, gvr schema.GroupVersionResource, ns, name string) (refNode, bool, error) {
	it := rw.item(key)
	if it == nil {
		return refNode{}, false, nil
	}
	n := refNode{Node: query.Node{Cluster: cluster, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Namespace: ns, Name: name, Cached: true}, gvr: gvr}
	err := it.Value(func(v []byte) error {
		// Labels are matched only for Pods (selected, selecting).
		rec, err := decodeRecord(v, gvr == podsGVR)
		if err != nil {
			return err
		}
		n.labels = rec.labels
		n.Kind, n.UID = kindAndUID(rec.json)
		return nil
	})
	return n, err == nil, err
}

// target resolves a reference to the cached object it names, or to a
// reference-only node.
func (rw *refWalk) target(cluster string, t relations.Target) (refNode, error) {
	k, err := rw.kind(t.Group, t.Kind)
	if err != nil {
		return refNode{}, err
	}
	ns := t.Namespace
	if k.clustered {
		ns = ""
	}
	if k.known {
		n, ok, err := rw.cached(cluster, k.gvr, ns, t.Name)
		if err != nil || ok {
			if ok && n.Kind == "" {
				n.Kind = t.Kind
				n = n.withID()
			}
			return n, err
		}
	}
	return refNode{Node: query.Node{Cluster: cluster, Group: t.Group, Version: k.gvr.Version, Resource: k.gvr.Resource, Kind: t.Kind, Namespace: ns, Name: t.Name}}.withID(), nil
}

// follows reports whether a node of group and kind would be kept
// (RelatedOptions.Kinds).
func (rw *refWalk) follows(group, kind string) (bool, error) {
	if len(rw.o.Kinds) == 0 {
		return true, nil
	}
	k, err := rw.kind(group, kind)
	return err == nil && rw.o.Follows(kind, k.gvr.Resource), err
}

// kind is the resource of a group and kind: the kind index (the store has
// held objects of it), else the built-in table (resource only).
func (rw *refWalk) kind(group, kind string) (kindInfo, error) {
	gk := schema.GroupKind{Group: group, Kind: kind}
	if k, ok := rw.kinds[gk]; ok {
		return k, nil
	}
	var k kindInfo
	v, err := get(rw.txn, kindKey(group, kind))
	if err != nil {
		return k, err
	}
	if v != nil {
		if k.gvr, k.clustered, err = decodeKind(group, v); err != nil {
			return k, err
		}
		k.known = true
	} else if res, ok := relations.BuiltinResource(group, kind); ok {
		k.gvr = schema.GroupVersionResource{Group: group, Resource: res}
		k.clustered = relations.ClusterScoped(group, kind)
	}
	rw.kinds[gk] = k
	return k, nil
}

// selected are the cached Pods a selector selects in cluster.
func (rw *refWalk) selected(cluster string, s *relations.Selector) ([]refNode, error) {
	var keys [][]byte
	if k, v, ok := s.Equality(); ok {
		// The label index spans the clusters: its entries end with the
		// cluster, so the ones of other clusters are skipped unread.
		pre := append(append(labelPrefix(podsGVR, k, v), s.Namespace...), sep)
		if err := rw.each(pre, func(key []byte, _ *bdg.Item) error {
			if _, _, c, err := tailBytes(key); err == nil && string(c) == cluster {
				keys = append(keys, bytes.Clone(key))
			}
			return nil
		}); err != nil {
			return nil, err
		}
	} else {
		pre := append(append(clusterPrefix(cluster, podsGVR), s.Namespace...), sep)
		if err := rw.each(pre, func(key []byte, _ *bdg.Item) error {
			keys = append(keys, bytes.Clone(key))
			return nil
		}); err != nil {
			return nil, err
		}
	}
	var out []refNode
	for _, key := range keys {
		ns, name, _, err := tail(key)
		if err != nil {
			return nil, err
		}
		p, ok, err := rw.cached(cluster, podsGVR, ns, name)
		if err != nil {
			return nil, err
		}
		if ok && s.Matches(p.labels) {
			out = append(out, p)
		}
	}
	return out, nil
}

// selecting are the cached objects whose selector selects the Pod n: the
// selectors of its namespace and cluster (read once per walk), each
// judged on its labels.
func (rw *refWalk) selecting(n refNode) ([]refNode, error) {
	pre := selectorPrefix(n.Cluster, n.Namespace)
	sels, ok := rw.sels[string(pre)]
	if !ok {
		if err := rw.each(pre, func(key []byte, item *bdg.Item) error {
			p := bytes.Split(key[len(pre):], []byte{sep})
			if len(p) != 4 {
				return fmt.Errorf("%w: selector key %q", errCorrupt, key)
			}
			s := refStoredSelector{gvr: schema.GroupVersionResource{Group: string(p[0]), Version: string(p[1]), Resource: string(p[2])}, name: string(p[3])}
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &s.sel) }); err != nil {
				return fmt.Errorf("%w: selector %q: %v", errCorrupt, key, err)
			}
			sels = append(sels, s)
			return nil
		}); err != nil {
			return nil, err
		}
		rw.sels[string(pre)] = sels
	}
	var out []refNode
	for i := range sels {
		if !sels[i].sel.Matches(n.labels) {
			continue
		}
		s, ok, err := rw.cached(n.Cluster, sels[i].gvr, n.Namespace, sels[i].name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// item is the item at key (valid until the next item or value), nil
// when there is none.
func (rw *refWalk) item(key []byte) *bdg.Item {
	if rw.oit == nil {
		rw.oit = rw.txn.NewIterator(bdg.IteratorOptions{})
	}
	if rw.oit.Seek(key); !rw.oit.Valid() || !bytes.Equal(rw.oit.Item().Key(), key) {
		return nil
	}
	return rw.oit.Item()
}

// value is a copy of the value at key, nil when there is none.
func (rw *refWalk) value(key []byte) ([]byte, error) {
	it := rw.item(key)
	if it == nil {
		return nil, nil
	}
	return it.ValueCopy(nil)
}
