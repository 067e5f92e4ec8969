package badger

import (
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
