package badger

// How a Related walk reads a node: from its E/ entry or its record, the
// targets of references, the kinds it follows, and the Pods a selector
// selects (or the selectors that select a Pod). The walk itself, breadth
// first over these reads, is related.go.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/relations"
)

// cached reads the object at its primary key as a node (ok false: the
// store does not hold it).
func (rw *relWalk) cached(cluster string, gvr schema.GroupVersionResource, ns, name string) (relNode, bool, error) {
	// objKey, built in a buffer: most calls find the object memoized.
	rw.keyBuf = appendJoin(rw.keyBuf[:0], "o", gvr.Group, gvr.Version, gvr.Resource, ns, name, cluster)
	key := rw.keyBuf
	if c, ok := rw.objs[string(key)]; ok {
		return c.n, c.ok, nil
	}
	n, ok, err := rw.read(key, cluster, gvr, ns, name)
	if ok && n.Kind != "" {
		n = n.withID()
	}
	if err == nil {
		rw.objs[string(key)] = cachedObj{n, ok}
	}
	return n, ok, err
}

// read is the node at key: from its E/ entry when it has one (kind, uid,
// a Pod's labels and the edges, without reading the object's record from
// the value log; the entry exists only while the object does), else
// from its record.
func (rw *relWalk) read(key []byte, cluster string, gvr schema.GroupVersionResource, ns, name string) (relNode, bool, error) {
	n := relNode{Node: query.Node{Cluster: cluster, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Namespace: ns, Name: name, Cached: true}, gvr: gvr}
	rw.relBuf = appendJoin(rw.relBuf[:0], "E", cluster, gvr.Group, gvr.Version, gvr.Resource, ns, name) // relKey
	if it := rw.item(rw.relBuf); it != nil {
		v, err := it.ValueCopy(nil)
		if err != nil {
			return n, false, err
		}
		hd, edges, err := cutRelHeaderWith(v, gvr == podsGVR, rw.intern)
		if err != nil {
			return n, false, fmt.Errorf("relations of %s: %w", n.ID(), err)
		}
		n.Kind, n.UID, n.labels, n.edges = hd.kind, hd.uid, hd.labels, edges
		return n, true, nil
	}
	it := rw.item(key)
	if it == nil {
		return relNode{}, false, nil
	}
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
func (rw *relWalk) target(cluster string, t relations.Target) (relNode, error) {
	k, err := rw.kind(t.Group, t.Kind)
	if err != nil {
		return relNode{}, err
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
	return relNode{Node: query.Node{Cluster: cluster, Group: t.Group, Version: k.gvr.Version, Resource: k.gvr.Resource, Kind: t.Kind, Namespace: ns, Name: t.Name}}.withID(), nil
}

// follows reports whether a node of group and kind would be kept
// (RelatedOptions.Kinds).
func (rw *relWalk) follows(group, kind string) (bool, error) {
	if len(rw.o.Kinds) == 0 {
		return true, nil
	}
	k, err := rw.kind(group, kind)
	return err == nil && rw.o.Follows(kind, k.gvr.Resource), err
}

// kind is the resource of a group and kind: the kind index (the store has
// held objects of it), else the built-in table (resource only).
func (rw *relWalk) kind(group, kind string) (kindInfo, error) {
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
func (rw *relWalk) selected(cluster string, s *relations.Selector) ([]relNode, error) {
	cands, err := rw.candidates(cluster, s)
	if err != nil {
		return nil, err
	}
	var out []relNode
	for _, p := range cands {
		if s.Matches(p.labels) {
			out = append(out, p)
		}
	}
	return out, nil
}

// candidates are the cached Pods of cluster a selector's range holds (the
// label index's range of one of its labels, or the cluster's Pods of the
// namespace), read once per walk.
func (rw *relWalk) candidates(cluster string, s *relations.Selector) ([]relNode, error) {
	var pre []byte
	k, v, eq := s.Equality()
	if eq {
		// The label index spans the clusters: its entries end with the
		// cluster, so the ones of other clusters are skipped unread.
		pre = append(append(labelPrefix(podsGVR, k, v), s.Namespace...), sep)
	} else {
		pre = append(append(clusterPrefix(cluster, podsGVR), s.Namespace...), sep)
	}
	memo := string(pre) + cluster
	if c, ok := rw.cands[memo]; ok {
		return c, nil
	}
	// Each read while the scan is on its key: cached reads with the
	// other iterator.
	var out []relNode
	if err := rw.each(pre, func(key []byte, _ *bdg.Item) error {
		ns, name, c, err := tailBytes(key)
		if eq && (err != nil || string(c) != cluster) {
			return nil
		}
		if err != nil {
			return err
		}
		p, ok, err := rw.cached(cluster, podsGVR, rw.intern(ns), string(name))
		if err != nil {
			return err
		}
		if ok {
			out = append(out, p)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rw.cands[memo] = out
	return out, nil
}

// nsSelectors are the selectors of a namespace and cluster (Q/), read
// once per walk, and an index of them by the label each requires: a Pod
// is judged against the few that require one of its labels, not every
// selector of its namespace (30 at the benchmark's scale).
type nsSelectors struct {
	sels []storedSelector
	// byEq: the selectors requiring eqKey=eqVal, by key and value, as
	// indexes into sels, rising; other the ones requiring none.
	byEq  map[string]map[string][]int
	other []int
}

// selecting are the cached objects whose selector selects the Pod n: the
// selectors of its namespace and cluster (read once per walk), each
// judged on its labels, in the order of their keys. The slice is valid
// until the next call.
func (rw *relWalk) selecting(n relNode) ([]relNode, error) {
	rw.preBuf = append(appendJoin(rw.preBuf[:0], "Q", n.Cluster, n.Namespace), sep) // selectorPrefix
	pre := rw.preBuf
	ns, ok := rw.sels[string(pre)]
	if !ok {
		ns = &nsSelectors{byEq: map[string]map[string][]int{}}
		if err := rw.each(pre, func(key []byte, item *bdg.Item) error {
			p := bytes.Split(key[len(pre):], []byte{sep})
			if len(p) != 4 {
				return fmt.Errorf("%w: selector key %q", errCorrupt, key)
			}
			s := storedSelector{gvr: schema.GroupVersionResource{Group: string(p[0]), Version: string(p[1]), Resource: string(p[2])}, name: string(p[3])}
			if err := item.Value(func(v []byte) error {
				sel, err := rw.selector(v)
				if err == nil {
					s.sel = *sel
				}
				return err
			}); err != nil {
				return fmt.Errorf("%w: selector %q: %v", errCorrupt, key, err)
			}
			s.eqKey, s.eqVal, s.eq = s.sel.Equality()
			i := len(ns.sels)
			ns.sels = append(ns.sels, s)
			if !s.eq {
				ns.other = append(ns.other, i)
				return nil
			}
			vals := ns.byEq[s.eqKey]
			if vals == nil {
				vals = map[string][]int{}
				ns.byEq[s.eqKey] = vals
			}
			vals[s.eqVal] = append(vals[s.eqVal], i)
			return nil
		}); err != nil {
			return nil, err
		}
		rw.sels[string(pre)] = ns
	}
	// The candidates, in sels' order: each list rises, and more than one
	// is merged by sorting.
	idx, lists := append(rw.selIdx[:0], ns.other...), min(len(ns.other), 1)
	for k, vals := range ns.byEq {
		if v, ok := n.labels[k]; ok && len(vals[v]) > 0 {
			idx, lists = append(idx, vals[v]...), lists+1
		}
	}
	if lists > 1 {
		slices.Sort(idx)
	}
	rw.selIdx = idx
	out := rw.selOut[:0]
	for _, i := range idx {
		sel := &ns.sels[i]
		if !sel.sel.Matches(n.labels) {
			continue
		}
		s, ok, err := rw.cached(n.Cluster, sel.gvr, n.Namespace, sel.name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, s)
		}
	}
	rw.selOut = out
	return out, nil
}

// item is the item at key (valid until the next item or value), nil
// when there is none.
func (rw *relWalk) item(key []byte) *bdg.Item {
	if rw.oit == nil {
		rw.oit = newSeeker(rw.txn)
	}
	return rw.oit.item(key)
}

// get is the value at key, nil when there is none.
func get(txn *bdg.Txn, key []byte) ([]byte, error) {
	it, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return it.ValueCopy(nil)
}

// kindAndUID reads kind and metadata.uid in one pass that stops once it
// has both (before spec and status, in the order objects are written).
func kindAndUID(obj []byte) (kind, uid string) {
	_, _ = rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(obj, m.ValueStart)
		if err != nil {
			return 0, err
		}
		switch string(m.Key) {
		case "kind":
			kind, _ = rawjson.String(obj[m.ValueStart:end])
		case "metadata":
			_, _ = rawjson.EachMember(obj, m.ValueStart, func(mm rawjson.Member) (int, error) {
				e, err := rawjson.SkipValue(obj, mm.ValueStart)
				if err == nil && string(mm.Key) == "uid" {
					uid, _ = rawjson.String(obj[mm.ValueStart:e])
				}
				return e, err
			})
		}
		if kind != "" && uid != "" {
			return 0, errStopScan
		}
		return end, nil
	})
	return kind, uid
}
