package badger

import (
	"bytes"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

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
