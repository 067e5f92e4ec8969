package badger

import (
	"bytes"
	"slices"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

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

func (rw *relWalk) visible(n query.Node) bool { return rw.o.Sees(n) }

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
