package badger

import (
	"bytes"
	"errors"
	"fmt"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relations"
)

// relState is what a batch did to an object's E/ entry: its new value, or
// gone.
type relState struct {
	gone bool
	v    []byte
}

// kindSeen remembers, per process, the resources whose kind index entry
// (K/) was written, so the entry costs one write per resource and process,
// not one per event.
type kindSeen struct{ gvr schema.GroupVersionResource }

// relate keeps the relations of the object at (gvr, ns, name) of the
// writer's cluster: it reads them from obj and rewrites the E/, R/ and Q/
// entries only when they changed (rewriteEdges: only the R/ and Q/
// entries that changed). lbls are the object's labels, kept in the E/
// entry of a Pod (what Related matches selectors against). mayExist is
// false for an object the store does not hold, whose old relations need
// not be read.
//
// What relations come from (kind, owner references, spec) is hashed and
// the hash leads the E/ entry: an update that keeps them (a status
// update, most updates) is recognized by one small read and the hash,
// without decoding anything. A kind the store has indexed that names
// nothing in its spec and has no "ownerReferences" in its bytes (most
// ConfigMaps, Secrets, Nodes) is not read at all.
func (w *writer) relate(gvr schema.GroupVersionResource, ns, name string, obj []byte, lbls map[string]string, mayExist bool) error {
	if w.s.noRelations {
		return nil
	}
	_, kindKnown := w.s.kinds.Load(kindSeen{gvr})
	gr := gvr.GroupResource()
	spec := relations.HasSpecRelations(gr)
	read := !kindKnown || spec || bytes.Contains(obj, ownerRefsMember)
	var rd *relRead
	var doc []byte // rd's document, when this goroutine read it
	if read {
		// Read ahead by the batch's workers (relate_pre.go), else here.
		if rd = w.preRead(gvr, ns, name, obj); rd == nil {
			rd = &relRead{}
			doc = w.relDoc.readHeader(rd, gr, obj, spec)
		}
		if rd.err != nil {
			return rd.err // checked by the materializer: not reached
		}
		if !kindKnown && rd.kind != "" {
			if err := w.set(kindKey(gvr.Group, rd.kind), encodeKind(gvr, ns == "")); err != nil {
				return err
			}
			w.s.kinds.Store(kindSeen{gvr}, true)
		}
	}
	fkey := relKey(w.cluster, gvr, ns, name)
	var old []byte
	if mayExist {
		var err error
		if old, err = w.relations(fkey); err != nil {
			return err
		}
	}
	var head []byte
	if read {
		if gvr != podsGVR {
			lbls = nil
		}
		head = relHeader(rd.h, rd.kind, rd.uid, lbls)
		// The header is self-delimiting: a prefix is the same header.
		if bytes.HasPrefix(old, head) {
			return nil // what relations come from, and the node, did not change
		}
	}
	var nv, sel []byte
	var kind, uid string
	var refs []relations.Ref
	var rkeys [][]byte
	if read {
		if !rd.extracted {
			if doc == nil { // read ahead without its edges: read again
				x := relRead{}
				doc = w.relDoc.readHeader(&x, gr, obj, spec)
				if x.err != nil {
					return x.err
				}
			}
			x := *rd // not changed in place: the read-ahead result may be taken again (an event applied again)
			x.extract(w.cluster, gvr, ns, name, doc, false)
			rd = &x
		}
		if rd.extErr != nil {
			// The object is stored all the same, relating to nothing: a
			// selector the member's apiserver accepted but this reader
			// cannot is no reason to drop the object.
			w.s.log.Warn("object stored without its relations", "cluster", w.cluster, "resource", gvr.String(), "namespace", ns, "name", name, "err", rd.extErr)
		}
		if rd.encErr != nil {
			return rd.encErr
		}
		// Kept even when empty: the hash spares the next update a decode.
		nv = append(append(make([]byte, 0, len(head)+len(rd.edges)), head...), rd.edges...)
		if rd.selLen > 0 {
			sel = nv[len(nv)-rd.selLen:]
		}
		kind, uid, refs, rkeys = rd.kind, rd.uid, rd.rel.Refs, rd.rkeys
	}
	if bytes.Equal(old, nv) {
		return nil
	}
	if nv == nil {
		if err := w.dropRelations(gvr, ns, name, old); err != nil {
			return err
		}
		w.rels()[string(fkey)] = relState{gone: true}
		return w.del(fkey)
	}
	if err := w.rewriteEdges(gvr, ns, name, old, kind, uid, refs, rkeys, sel); err != nil {
		return err
	}
	w.rels()[string(fkey)] = relState{v: nv}
	return w.set(fkey, nv)
}

// unrelate drops the relations of a deleted object.
func (w *writer) unrelate(gvr schema.GroupVersionResource, ns, name string) error {
	if w.s.noRelations {
		return nil
	}
	fkey := relKey(w.cluster, gvr, ns, name)
	old, err := w.relations(fkey)
	if err != nil || old == nil {
		return err
	}
	if err := w.dropRelations(gvr, ns, name, old); err != nil {
		return err
	}
	w.rels()[string(fkey)] = relState{gone: true}
	return w.del(fkey)
}

// dropRelations deletes the R/ and Q/ entries of the relations old (nil:
// none).
func (w *writer) dropRelations(gvr schema.GroupVersionResource, ns, name string, old []byte) error {
	if old == nil {
		return nil
	}
	rel, err := decodeRelations(old)
	if err != nil {
		return fmt.Errorf("relations of %s %s/%s: %w", gvr, ns, name, err)
	}
	for i, r := range rel.Refs {
		if !rel.keyed(i) {
			continue
		}
		if err := w.del(reverseKeyOf(rel.old(i), w.cluster, r.Target, r.Type, gvr, ns, name)); err != nil {
			return err
		}
	}
	if rel.Selector != nil {
		return w.del(selectorKey(w.cluster, ns, gvr, name))
	}
	return nil
}

func (w *writer) rels() map[string]relState {
	if w.ov.rels == nil {
		w.ov.rels = map[string]relState{}
	}
	return w.ov.rels
}

// relations is the stored E/ value at fkey (nil: none), newest first from
// this batch, the batch in flight, then the snapshot (read ahead by
// relatePrepass, or now).
func (w *writer) relations(fkey []byte) ([]byte, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.rels[string(fkey)]; ok {
			return st.v, nil
		}
	}
	if pp := w.relDoc.pre; pp != nil {
		if v, ok := pp.stored[string(fkey)]; ok {
			return v, nil // read ahead (storedRelations)
		}
	}
	it, err := w.txn.Get(fkey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return it.ValueCopy(nil)
}

// encodeKind is a K/ entry's value: version, resource, and whether the
// resource is cluster-scoped.
func encodeKind(g schema.GroupVersionResource, clustered bool) []byte {
	c := "n"
	if clustered {
		c = "c"
	}
	return join(g.Version, g.Resource, c)
}

func decodeKind(group string, v []byte) (schema.GroupVersionResource, bool, error) {
	p := bytes.Split(v, []byte{sep})
	if len(p) != 3 {
		return schema.GroupVersionResource{}, false, errCorrupt
	}
	return schema.GroupVersionResource{Group: group, Version: string(p[0]), Resource: string(p[1])}, string(p[2]) == "c", nil
}
