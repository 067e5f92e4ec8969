package badger

import (
	"bytes"
	"context"
	"encoding/json"
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
		rw := r.walk(txn)
		rw.o = o
		defer r.done(rw)
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
		// The levels alternate between two buffers: a level's frontier is
		// done with once the next is found.
		frontier, next := append(rw.front[:0], root), rw.next
		defer func() { rw.front, rw.next = frontier, next }()
		for d := 0; d < o.Depth && len(frontier) > 0 && !rw.g.Truncated; d++ {
			next = next[:0]
			last := d == o.Depth-1
			for _, n := range frontier {
				if d > 0 && relations.Shared(n.Group, n.Kind, n.Name) {
					continue // shown, not walked through (relations.Shared)
				}
				var err error
				if next, err = rw.expand(n, next, last); err != nil {
					return err
				}
			}
			frontier, next = next, frontier
		}
		g = rw.answer()
		return nil
	})
	return g, err
}

// walk is a walk for txn, one of an earlier call (Reader.walks) when
// there is one: a deep walk's maps and buffers grow to thousands of
// entries, which a new walk would grow again.
func (r *Reader) walk(txn *bdg.Txn) *relWalk {
	rw, _ := r.walks.Get().(*relWalk)
	if rw == nil {
		return newRelWalk(txn)
	}
	rw.txn = txn
	return rw
}

// done closes rw and keeps it for a later call, emptied: its maps keep
// their room, its buffers their capacity, and nothing of its answer.
func (r *Reader) done(rw *relWalk) {
	rw.close()
	rw.o, rw.txn, rw.it, rw.oit, rw.cur = query.RelatedOptions{}, nil, nil, nil, 0
	rw.seen, rw.kinds, rw.edges = emptied(rw.seen), emptied(rw.kinds), emptied(rw.edges)
	rw.cands, rw.objs, rw.sels, rw.strs = emptied(rw.cands), emptied(rw.objs), emptied(rw.sels), emptied(rw.strs)
	rw.g = query.Graph{Nodes: cut(rw.g.Nodes), Edges: cut(rw.g.Edges)}
	rw.ids, rw.front, rw.next, rw.selOut, rw.types = cut(rw.ids), cut(rw.front), cut(rw.next), cut(rw.selOut), rw.types[:0]
	r.walks.Put(rw)
}

// maxKept bounds what a kept walk keeps: emptying a map costs its room,
// which every later call would pay, so a walk much larger than most
// (ten thousand edges among its 2,000 nodes) leaves those of its maps
// and buffers to the collector.
const maxKept = 8192

// emptied is m emptied, or a new map when m held more than maxKept.
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > maxKept {
		return map[K]V{}
	}
	clear(m)
	return m
}

// cut is s emptied (its elements zeroed: nothing of the answer kept), or
// nil when it held more than maxKept.
func cut[E any](s []E) []E {
	if len(s) > maxKept {
		return nil
	}
	clear(s)
	return s[:0]
}

// answer is the walk's graph, copied out of the buffers a later walk
// reuses; nil slices when empty, as a walk of its own would leave them.
func (rw *relWalk) answer() query.Graph {
	g := query.Graph{Truncated: rw.g.Truncated}
	if len(rw.g.Nodes) > 0 {
		g.Nodes = slices.Clone(rw.g.Nodes)
	}
	if len(rw.g.Edges) > 0 {
		g.Edges = slices.Clone(rw.g.Edges)
	}
	return g
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
	// edges are the answer's edges by type and node indexes (packEdge):
	// hashing one integer costs less than hashing two node IDs.
	edges map[uint64]struct{}
	// cands memoizes the candidates of selected by cluster and range: a
	// Deployment, its ReplicaSet and its Service select the same Pods.
	cands map[string][]relNode
	// cur is the index in g.Nodes of the node being expanded.
	cur int
	// objs memoizes cached (a Pod's ReplicaSet, ConfigMaps and Node are
	// met once per Pod), sels the selectors of a namespace.
	objs map[string]cachedObj
	sels map[string]*nsSelectors
	// it serves every prefix scan of the walk: creating a Badger iterator
	// costs more than a seek, and a seeker takes rising prefixes (a
	// namespace's Pods, most of which nothing names) without a seek each.
	it *seeker
	// oit reads the objects and E/ entries: a seek of an iterator already
	// open costs less than a Get, which takes and releases every table it
	// consults; a selection's entries, in key order, cost a few steps each.
	oit *seeker
	// strs interns what repeats across keys (edge types, groups,
	// resources, namespaces, kinds); run is expand's state of the R/ keys
	// of the node expanded, reused from node to node.
	strs map[string]string
	run  reverseRun
	// refs is edgesOf's buffer, reused from node to node; keyBuf and
	// relBuf cached's and read's keys, preBuf expand's and selecting's
	// prefixes; selIdx and selOut selecting's.
	refs                   []relations.Ref
	keyBuf, relBuf, preBuf []byte
	selIdx                 []int
	selOut                 []relNode
	// ids are the nodes' IDs by index in g.Nodes; idBuf builds one to
	// look it up (linkSeen).
	ids   []string
	idBuf []byte
	// types are the edge types met, numbered by edgeType.
	types []string
	// front and next are the buffers of Related's levels.
	front, next []relNode
	// selectors are the selectors decoded by their JSON (selector), kept
	// from walk to walk (Reader.done), at most maxSelectors.
	selectors map[string]*relations.Selector
}

// packEdge is an edge as one integer: its type's number (edgeType) and
// its nodes' indexes in g.Nodes, which MaxRelatedNodes keeps below 2^24
// (the constant below fails the build if it grows past). A walk of a
// thousand nodes keeps about three thousand edges, and an integer key
// hashes faster than a struct.
func packEdge(typ, from, to int) uint64 {
	return uint64(typ)<<48 | uint64(from)<<24 | uint64(to)
}

const _ uint32 = 1<<24 - 1 - query.MaxRelatedNodes

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
	// eqKey=eqVal is a label the selector requires (eq: it has one), by
	// which nsSelectors finds the few that may select a Pod before
	// Matches ranges over their labels.
	eqKey, eqVal string
	eq           bool
}

func newRelWalk(txn *bdg.Txn) *relWalk {
	return &relWalk{txn: txn, seen: map[string]int{}, kinds: map[schema.GroupKind]kindInfo{}, edges: map[uint64]struct{}{},
		objs: map[string]cachedObj{}, sels: map[string]*nsSelectors{}, cands: map[string][]relNode{}, strs: map[string]string{},
		selectors: map[string]*relations.Selector{}}
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
	k := packEdge(rw.edgeType(typ), rw.cur, oi)
	if fromFound {
		k = packEdge(rw.edgeType(typ), oi, rw.cur)
	}
	if _, ok := rw.edges[k]; !ok {
		rw.edges[k] = struct{}{}
		rw.g.Edges = append(rw.g.Edges, query.Edge{Type: typ, From: from.nodeID(), To: to.nodeID()})
	}
	// A reference-only node is followed too: what else names it.
	return other, added
}

// reverseRun is what the R/ keys of one target repeat from key to key:
// a walk's last hop meets a thousand of them (the Pods on a Node, those
// mounting a namespace's ConfigMap), and all of them but the name are
// the same as the key before (the same edge type, resource and
// namespace) and their values name the same kind. Those parts are cut,
// interned and judged once per run of equal ones (cutSource, sourceID),
// not once per key.
type reverseRun struct {
	cluster string
	tns     []byte
	// prefix is the last key's source part up to its name (nil: none
	// yet); typ, gvr, ns and old are cut from it.
	prefix  []byte
	typ     string
	typNum  int
	gvr     schema.GroupVersionResource
	ns      string
	old     bool
	visible bool
	// kind is the last value's kind (kindOK: set), id the ID of its
	// source up to the name, and follows whether that kind is kept.
	kind    []byte
	kindStr string
	kindOK  bool
	id      []byte
	follows bool
}

// start begins the run of a target's R/ keys in cluster and namespace ns.
func (r *reverseRun) start(cluster, ns string) {
	r.cluster, r.tns = cluster, append(r.tns[:0], ns...)
	r.prefix, r.kindOK = r.prefix[:0], false
}

// cutSource cuts an R/ key's source part (what follows reversePrefix)
// into the run, and returns the source's name; ok false as cutReverseKey.
// A key whose part before its name equals the last key's is cut by
// finding its last separator: the name after it holds none, as
// cutReverseKey would require.
func (rw *relWalk) cutSource(rest []byte) (name []byte, ok bool) {
	r := &rw.run
	j := bytes.LastIndexByte(rest, sep)
	if j >= 0 && len(r.prefix) > 0 && bytes.Equal(rest[:j+1], r.prefix) {
		return rest[j+1:], true
	}
	p, ok := cutReverseKey(rest, r.tns)
	if !ok {
		r.prefix = r.prefix[:0]
		return nil, false
	}
	r.prefix = append(r.prefix[:0], rest[:j+1]...)
	r.typ = string(p.typ)
	r.typNum = rw.edgeType(r.typ)
	r.gvr = schema.GroupVersionResource{Group: rw.intern(p.group), Version: rw.intern(p.version), Resource: rw.intern(p.resource)}
	r.ns, r.old = rw.intern(p.ns), p.old
	// What link judges of the source, on the same fields.
	r.visible = rw.visible(query.Node{Cluster: r.cluster, Group: r.gvr.Group, Resource: r.gvr.Resource, Namespace: r.ns})
	r.kindOK = false
	return p.name, true
}

// sourceID is the ID of the run's source of kind and name, built in a
// buffer valid until the next call: a Pod of a walk's last hop is met
// through each object it names (its Node, ConfigMaps, ServiceAccount),
// and its node, ID and map entry are made once; the other meetings cost
// a lookup by this ID.
func (rw *relWalk) sourceID(kind, name []byte) []byte {
	r := &rw.run
	if !r.kindOK || !bytes.Equal(kind, r.kind) {
		r.kind, r.kindOK = append(r.kind[:0], kind...), true
		r.kindStr = rw.intern(kind)
		r.id = appendNodeID(r.id[:0], r.cluster, r.gvr.Group, r.kindStr, r.ns, "")
		r.follows = rw.o.Follows(r.kindStr, r.gvr.Resource)
	}
	rw.idBuf = append(append(rw.idBuf[:0], r.id...), name...)
	return rw.idBuf
}

// linkSeen is link(the run's type, the source, the node being expanded,
// true) for a source of the run's kind the answer holds at index oi.
func (rw *relWalk) linkSeen(oi int) {
	r := &rw.run
	if !r.visible || !r.follows {
		return
	}
	k := packEdge(r.typNum, oi, rw.cur)
	if _, ok := rw.edges[k]; !ok {
		rw.edges[k] = struct{}{}
		rw.g.Edges = append(rw.g.Edges, query.Edge{Type: r.typ, From: rw.ids[oi], To: rw.ids[rw.cur]})
	}
}

// linkNew is link(the run's type, the source, the node being expanded,
// true) for a source of the run's kind the answer does not hold, at the
// last hop: its node is taken from the R/ key and value
// (reverseSource.node), and its ID is the one sourceID built; its name
// is the ID's end.
func (rw *relWalk) linkNew(name []byte, uid string) {
	r := &rw.run
	if !r.visible || !r.follows {
		return
	}
	if len(rw.g.Nodes) >= query.MaxRelatedNodes {
		rw.g.Truncated = true
		return
	}
	id := string(rw.idBuf)
	oi := len(rw.g.Nodes)
	rw.seen[id] = oi
	rw.g.Nodes = append(rw.g.Nodes, query.Node{Cluster: r.cluster, Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource,
		Kind: r.kindStr, Namespace: r.ns, Name: id[len(id)-len(name):], UID: uid, Cached: true})
	rw.ids = append(rw.ids, id)
	// New, so is its edge; kept for a later meeting of the same source.
	rw.edges[packEdge(r.typNum, oi, rw.cur)] = struct{}{}
	rw.g.Edges = append(rw.g.Edges, query.Edge{Type: r.typ, From: id, To: rw.ids[rw.cur]})
}

// appendNodeID appends query.Node.ID's form of a node's ID to b.
func appendNodeID(b []byte, cluster, group, kind, ns, name string) []byte {
	b = append(append(b, cluster...), '/')
	b = append(append(b, group...), '/')
	b = append(append(b, kind...), '/')
	b = append(append(b, ns...), '/')
	return append(b, name...)
}

// expand follows every relation of n and appends to next the cached
// nodes it found first. On the last hop (last) what it finds is not
// expanded in turn, and so not appended: a source found through an R/
// key is taken from the key and its value (linkNew, reverseSource.node),
// not read.
func (rw *relWalk) expand(n relNode, next []relNode, last bool) ([]relNode, error) {
	rw.cur = rw.seen[n.nodeID()]
	keep := func(m relNode, ok bool) {
		if ok && !last {
			next = append(next, m)
		}
	}
	// Outgoing: owners and references, then the Pods its selector
	// selects, from the E/ entry the node was read from (cached); a node
	// read from its record, or a reference, has none.
	if n.edges != nil {
		refs, sel, err := rw.edgesOf(n.edges)
		if err != nil {
			return nil, fmt.Errorf("relations of %s: %w", n.ID(), err)
		}
		for _, ref := range refs {
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
		if sel != nil && rw.o.Follows("Pod", podsGVR.Resource) {
			// selected's Pods, judged in place among the candidates.
			cands, err := rw.candidates(n.Cluster, sel)
			if err != nil {
				return nil, err
			}
			for i := range cands {
				if sel.Matches(cands[i].labels) {
					keep(rw.link(query.EdgeSelects, n, cands[i], false))
				}
			}
		}
	}
	// Incoming: what names n (its children, its referrers), each R/ key
	// linked while the scan is on it, in key order.
	rw.preBuf = append(appendJoin(rw.preBuf[:0], "R", n.Cluster, n.Group, n.Kind, n.Namespace, n.Name), sep) // reversePrefix
	pre := rw.preBuf
	run := &rw.run
	run.start(n.Cluster, n.Namespace)
	if err := rw.each(pre, func(key []byte, item *bdg.Item) error {
		name, ok := rw.cutSource(key[len(pre):])
		if !ok {
			return fmt.Errorf("%w: reverse key %q", errCorrupt, key)
		}
		// The value as cutReverseValue reads it, without copies: most
		// sources are already in the answer and need neither string.
		var kind, uid []byte
		known := false
		if err := item.Value(func(v []byte) error {
			var err error
			kind, uid, known, err = cutReverseValueBytes(v, run.old)
			return err
		}); err != nil {
			return fmt.Errorf("reverse key %q: %w", key, err)
		}
		if known && len(kind) > 0 {
			// A source the answer holds: linked by its index.
			if oi, ok := rw.seen[string(rw.sourceID(kind, name))]; ok {
				rw.linkSeen(oi)
				return nil
			}
			if last {
				rw.linkNew(name, uidText(uid, run.old))
				return nil
			}
		}
		s := reverseSource{typ: run.typ, gvr: run.gvr, ns: run.ns, name: string(name)}
		if last && known {
			// Taken from here, not read (reverseSource.node).
			s.kind, s.uid, s.known = rw.intern(kind), uidText(uid, run.old), true
		}
		src, ok := s.node(n.Cluster)
		if !ok {
			var err error
			if src, ok, err = rw.cached(n.Cluster, s.gvr, s.ns, s.name); err != nil {
				return err
			}
		}
		if ok {
			keep(rw.link(s.typ, src, n, true))
		}
		return nil
	}); err != nil {
		return nil, err
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

// edgesOf is decodeEdges for a walk: the refs (valid until the next
// call) with their strings interned, and the selector (nil: none).
func (rw *relWalk) edgesOf(b []byte) ([]relations.Ref, *relations.Selector, error) {
	refs, _, sel, err := cutRefsInto(rw.refs, b, rw.intern)
	if err != nil {
		return nil, nil, err
	}
	rw.refs = refs
	if len(sel) == 0 {
		return refs, nil, nil
	}
	s, err := rw.selector(sel)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: selector: %v", errCorrupt, err)
	}
	return refs, s, nil
}

// maxSelectors bounds relWalk.selectors.
const maxSelectors = 4096

// selector is the selector whose JSON is b, decoded once per walk and
// kept for later walks (relWalk.selectors): a Pod's walk reads the 30
// selectors of its namespace, which decoding cost more than reading. A
// decoded selector is only read (Matches, Equality), never changed, so
// one serves every walk that meets the same JSON.
func (rw *relWalk) selector(b []byte) (*relations.Selector, error) {
	if s, ok := rw.selectors[string(b)]; ok {
		return s, nil
	}
	s := &relations.Selector{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, err
	}
	if len(rw.selectors) >= maxSelectors {
		clear(rw.selectors)
	}
	rw.selectors[string(b)] = s
	return s, nil
}

// reverseSource is the source of an R/ key: its edge type and object,
// and (known) its kind and uid from the key's value.
type reverseSource struct {
	typ, ns, name string
	gvr           schema.GroupVersionResource
	kind, uid     string
	known         bool
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
