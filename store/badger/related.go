package badger

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Related answers the objects related to one object, breadth first to
// o.Depth hops, from one snapshot: its owners and references (E/), what
// names it (R/), the Pods its selector selects (the label index, or the
// cluster's Pods of the namespace for a selector without an equality),
// for a Pod the selectors of its namespace that select it (Q/), and the
// copies of the starting object in other clusters (its o/ prefix). An
// object every Pod of its namespace names (relations.Shared) is answered
// but not followed, unless the walk starts from it.
func (r *Reader) Related(_ context.Context, o query.RelatedOptions) (query.Graph, error) {
	if err := o.Validate(); err != nil {
		return query.Graph{}, err
	}
	if r.noRelations {
		return query.Graph{}, errNoRelations
	}
	var g query.Graph
	err := r.db.View(func(txn *bdg.Txn) error {
		rw := newRelWalk(txn)
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
		frontier := []relNode{root}
		for d := 0; d < o.Depth && len(frontier) > 0 && !rw.g.Truncated; d++ {
			var next []relNode
			last := d == o.Depth-1
			for _, n := range frontier {
				if d > 0 && relations.Shared(n.Group, n.Kind, n.Name) {
					continue // shown, not walked through (relations.Shared)
				}
				found, err := rw.expand(n, last)
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

// relNode is a node and what expanding it needs.
type relNode struct {
	query.Node
	gvr    schema.GroupVersionResource
	labels map[string]string
	// edges are the object's edges from its E/ entry (what follows the
	// header), nil when it has none.
	edges []byte
	// id is Node.ID(), once: a walk looks a node up by it for every edge
	// that reaches it (withID).
	id string
}

// withID returns n with its ID computed.
func (n relNode) withID() relNode {
	n.id = n.ID()
	return n
}

// nodeID is n's ID, computed once when withID was called.
func (n *relNode) nodeID() string {
	if n.id == "" {
		return n.ID()
	}
	return n.id
}

type kindInfo struct {
	gvr       schema.GroupVersionResource
	clustered bool
	known     bool
}

type relWalk struct {
	o     query.RelatedOptions
	txn   *bdg.Txn
	g     query.Graph
	seen  map[string]int // node ID -> index in g.Nodes
	kinds map[schema.GroupKind]kindInfo
	// edges are the answer's edges by type and node indexes: hashing two
	// ints costs less than hashing two node IDs.
	edges map[edgeKey]bool
	// cands memoizes the candidates of selected by cluster and range: a
	// Deployment, its ReplicaSet and its Service select the same Pods.
	cands map[string][]relNode
	// cur is the index in g.Nodes of the node being expanded.
	cur int
	// objs memoizes cached (a Pod's ReplicaSet, ConfigMaps and Node are
	// met once per Pod), sels the selectors of a namespace.
	objs map[string]cachedObj
	sels map[string][]storedSelector
	// it serves every prefix scan of the walk: creating a Badger iterator
	// costs more than a seek, and a seeker takes rising prefixes (a
	// namespace's Pods, most of which nothing names) without a seek each.
	it *seeker
	// oit reads the objects and E/ entries: a seek of an iterator already
	// open costs less than a Get, which takes and releases every table it
	// consults; a selection's entries, in key order, cost a few steps each.
	oit *seeker
	// strs interns what repeats across keys (edge types, groups,
	// resources, namespaces, kinds); srcs is expand's buffer of reverse
	// sources, reused from node to node.
	strs map[string]string
	srcs []reverseSource
	// ids are the nodes' IDs by index in g.Nodes; idBuf builds one to
	// look it up (linkSeen).
	ids   []string
	idBuf []byte
	// types are the edge types met, numbered by edgeType.
	types []string
}

// edgeKey is an edge by its type's number (edgeType) and its nodes'
// indexes: a walk of a thousand nodes keeps about three thousand, and a
// key of three integers hashes faster than one with a string.
type edgeKey struct {
	typ      int
	from, to int
}

// edgeType numbers the edge types of a walk in the order met.
func (rw *relWalk) edgeType(typ string) int {
	for i, t := range rw.types {
		if t == typ {
			return i
		}
	}
	rw.types = append(rw.types, typ)
	return len(rw.types) - 1
}

type cachedObj struct {
	n  relNode
	ok bool
}

type storedSelector struct {
	gvr  schema.GroupVersionResource
	name string
	sel  relations.Selector
	// eqKey=eqVal is a label the selector requires (eq: it has one), a
	// map lookup that rules out most of a namespace's selectors for a Pod
	// before Matches ranges over their labels.
	eqKey, eqVal string
	eq           bool
}

func newRelWalk(txn *bdg.Txn) *relWalk {
	return &relWalk{txn: txn, seen: map[string]int{}, kinds: map[schema.GroupKind]kindInfo{}, edges: map[edgeKey]bool{},
		objs: map[string]cachedObj{}, sels: map[string][]storedSelector{}, cands: map[string][]relNode{}, strs: map[string]string{}}
}

// intern returns b as a string, one per distinct value in a walk.
func (rw *relWalk) intern(b []byte) string {
	if s, ok := rw.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	rw.strs[s] = s
	return s
}

// splitN cuts b at each sep into exactly len(parts) parts, in place;
// false when b has another number of parts.
func splitN(b []byte, parts [][]byte) bool {
	for i := range len(parts) - 1 {
		j := bytes.IndexByte(b, sep)
		if j < 0 {
			return false
		}
		parts[i], b = b[:j], b[j+1:]
	}
	if bytes.IndexByte(b, sep) >= 0 {
		return false
	}
	parts[len(parts)-1] = b
	return true
}

func (rw *relWalk) close() {
	if rw.it != nil {
		rw.it.close()
	}
	if rw.oit != nil {
		rw.oit.close()
	}
}

// each calls f with the keys under prefix (and their items, valid during
// the call only).
func (rw *relWalk) each(prefix []byte, f func(key []byte, it *bdg.Item) error) error {
	if rw.it == nil {
		rw.it = newSeeker(rw.txn)
	}
	return rw.it.each(prefix, f)
}

func (rw *relWalk) visible(n query.Node) bool {
	if rw.o.Visible == nil {
		return true
	}
	if n.Resource == "" {
		return false // unknown resource: the caller's grants cannot be judged
	}
	return rw.o.Visible.Allows(schema.GroupResource{Group: n.Group, Resource: n.Resource}, n.Cluster, n.Namespace)
}

// add records n; false when it was already there or the graph is full.
func (rw *relWalk) add(n relNode) bool {
	_, added, _ := rw.index(n)
	return added
}

// index is n's index in g.Nodes, n recorded first when new (added); ok
// false when the graph is full.
func (rw *relWalk) index(n relNode) (i int, added, ok bool) {
	id := n.nodeID()
	if i, ok := rw.seen[id]; ok {
		return i, false, true
	}
	if len(rw.g.Nodes) >= query.MaxRelatedNodes {
		rw.g.Truncated = true
		return 0, false, false
	}
	i = len(rw.g.Nodes)
	rw.seen[id] = i
	rw.g.Nodes = append(rw.g.Nodes, n.Node)
	rw.ids = append(rw.ids, id)
	return i, true, true
}

// link records the edge from -> to, one of which is the node being
// expanded and the other the node found (fromFound: from is); the found
// node is added, and returned to be followed when new. A node the caller
// may not see or outside the kinds asked for is dropped with its edge.
func (rw *relWalk) link(typ string, from, to relNode, fromFound bool) (relNode, bool) {
	other := to
	if fromFound {
		other = from
	}
	if !rw.visible(other.Node) || !rw.o.Follows(other.Kind, other.Resource) {
		return relNode{}, false
	}
	oi, added, ok := rw.index(other)
	if !ok {
		return relNode{}, false // truncated
	}
	// The node being expanded (cur) was added before it was followed.
	k := edgeKey{typ: rw.edgeType(typ), from: rw.cur, to: oi}
	if fromFound {
		k.from, k.to = oi, rw.cur
	}
	if !rw.edges[k] {
		rw.edges[k] = true
		rw.g.Edges = append(rw.g.Edges, query.Edge{Type: typ, From: from.nodeID(), To: to.nodeID()})
	}
	// A reference-only node is followed too: what else names it.
	return other, added
}

// lookup finds a source of kind and name in the answer (ok false: it
// is not there), by its index in g.Nodes. A Pod of a walk's last hop is met through each object it names (its Node,
// ConfigMaps, its ServiceAccount): its node, ID and map entry are made
// once, and the other meetings cost a lookup by an ID built in a buffer
// from the R/ key and value while the scan is on them.
func (rw *relWalk) lookup(s reverseSource, kind string, name []byte, n relNode) (int, bool) {
	b := appendNodeID(rw.idBuf[:0], n.Cluster, s.gvr.Group, kind, s.ns, "")
	rw.idBuf = append(b, name...)
	oi, ok := rw.seen[string(rw.idBuf)]
	return oi, ok
}

// linkSeen is link(s.typ, the source, n, true) for a source the answer
// holds at index s.seen.
func (rw *relWalk) linkSeen(s reverseSource, n relNode) {
	o := rw.g.Nodes[s.seen]
	// What link judges, on the same fields.
	if !rw.visible(query.Node{Cluster: n.Cluster, Group: s.gvr.Group, Resource: s.gvr.Resource, Namespace: s.ns}) || !rw.o.Follows(o.Kind, s.gvr.Resource) {
		return
	}
	k := edgeKey{typ: rw.edgeType(s.typ), from: s.seen, to: rw.cur}
	if !rw.edges[k] {
		rw.edges[k] = true
		rw.g.Edges = append(rw.g.Edges, query.Edge{Type: s.typ, From: rw.ids[s.seen], To: n.nodeID()})
	}
}

// appendNodeID appends query.Node.ID's form of a node's ID to b.
func appendNodeID(b []byte, cluster, group, kind, ns, name string) []byte {
	b = append(append(b, cluster...), '/')
	b = append(append(b, group...), '/')
	b = append(append(b, kind...), '/')
	b = append(append(b, ns...), '/')
	return append(b, name...)
}

// expand follows every relation of n and returns the cached nodes it
// found first. On the last hop (last) what it finds is not expanded in
// turn: a source found through an R/ key is taken from the key and its
// value (reverseNode), not read.
func (rw *relWalk) expand(n relNode, last bool) ([]relNode, error) {
	rw.cur = rw.seen[n.nodeID()]
	var next []relNode
	keep := func(m relNode, ok bool) {
		if ok {
			next = append(next, m)
		}
	}
	// Outgoing: owners and references, then the Pods its selector
	// selects, from the E/ entry the node was read from (cached); a node
	// read from its record, or a reference, has none.
	if n.edges != nil {
		rel, err := decodeEdges(n.edges)
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
	srcs := rw.srcs[:0]
	tns := []byte(n.Namespace)
	if err := rw.each(pre, func(key []byte, item *bdg.Item) error {
		// The source, cut in place (cutReverseKey): a walk's last hop
		// meets a thousand of these keys (the Pods on a Node, mounting a
		// namespace's ConfigMap), and all but the name repeat from key to
		// key (interned).
		p, ok := cutReverseKey(key[len(pre):], tns)
		if !ok {
			return fmt.Errorf("%w: reverse key %q", errCorrupt, key)
		}
		// The value as cutReverseValue reads it, without copies: most
		// sources are already in the answer and need neither string.
		var kind, uid []byte
		known := false
		if err := item.Value(func(v []byte) error {
			var err error
			kind, uid, known, err = cutReverseValueBytes(v, p.old)
			return err
		}); err != nil {
			return fmt.Errorf("reverse key %q: %w", key, err)
		}
		s := reverseSource{typ: string(p.typ), gvr: schema.GroupVersionResource{Group: rw.intern(p.group), Version: rw.intern(p.version), Resource: rw.intern(p.resource)},
			ns: rw.intern(p.ns)}
		if known && len(kind) > 0 {
			// A source the answer holds: linked in turn below, by its index.
			if s.seen, s.linked = rw.lookup(s, rw.intern(kind), p.name, n); s.linked {
				srcs = append(srcs, s)
				return nil
			}
		}
		s.name = string(p.name)
		if last && known {
			// Taken from here, not read (reverseSource.node).
			s.kind, s.uid, s.known = rw.intern(kind), uidText(uid, p.old), true
		}
		srcs = append(srcs, s)
		return nil
	}); err != nil {
		return nil, err
	}
	rw.srcs = srcs
	for _, s := range srcs {
		if s.linked {
			rw.linkSeen(s, n)
			continue
		}
		src, ok := s.node(n.Cluster)
		if !ok {
			var err error
			if src, ok, err = rw.cached(n.Cluster, s.gvr, s.ns, s.name); err != nil {
				return nil, err
			}
		}
		if ok {
			keep(rw.link(s.typ, src, n, true))
		}
	}
	// The start, a shared object: the Pods naming it, which have no R/
	// key for it (unkeyed).
	if rw.cur == 0 && relations.Shared(n.Group, n.Kind, n.Name) && rw.o.Follows("Pod", podsGVR.Resource) {
		pods, err := rw.sharedReferrers(n)
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			keep(rw.link(string(relations.References), p, n, true))
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

// reverseSource is the source of an R/ key: its edge type and object,
// and (known) its kind and uid from the key's value.
type reverseSource struct {
	typ, ns, name string
	gvr           schema.GroupVersionResource
	kind, uid     string
	known         bool
	// linked: the answer holds the source, at index seen (linkSeen).
	seen   int
	linked bool
}

// node is the source as cached would read it, for a node that is not
// expanded (no labels, no edges): the R/ key exists exactly while the
// source's E/ entry does, whose kind and uid the value repeats. ok false:
// the value does not say (not read, or written before it carried them).
func (s reverseSource) node(cluster string) (relNode, bool) {
	if !s.known {
		return relNode{}, false
	}
	n := relNode{Node: query.Node{Cluster: cluster, Group: s.gvr.Group, Version: s.gvr.Version, Resource: s.gvr.Resource, Kind: s.kind,
		Namespace: s.ns, Name: s.name, UID: s.uid, Cached: true}, gvr: s.gvr}
	if n.Kind != "" {
		n = n.withID()
	}
	return n, true
}

// copies adds the copies of the starting object in the other clusters.
func (rw *relWalk) copies(root relNode) error {
	rw.cur = rw.seen[root.nodeID()]
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

// sharedReferrers are the cached Pods of n's cluster and namespace whose
// E/ entries name n, a shared object (relations.Shared), in key order.
// A Pod's reference to it has no R/ key (unkeyed), so it is found here,
// by the walk that starts from it, the only one that follows it.
func (rw *relWalk) sharedReferrers(n relNode) ([]relNode, error) {
	if n.Namespace == "" {
		return nil, nil
	}
	cands, err := rw.candidates(n.Cluster, &relations.Selector{Kind: "Pod", Namespace: n.Namespace})
	if err != nil {
		return nil, err
	}
	t := relations.Ref{Type: relations.References, Target: relations.Target{Group: n.Group, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name}}
	var out []relNode
	for _, p := range cands {
		if p.edges == nil {
			continue
		}
		refs, _, _, err := cutRefs(p.edges)
		if err != nil {
			return nil, fmt.Errorf("relations of %s: %w", p.ID(), err)
		}
		if slices.Contains(refs, t) {
			out = append(out, p)
		}
	}
	return out, nil
}
