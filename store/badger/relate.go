package badger

import (
	"bytes"
	"encoding/binary"
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

// relUpsert is what an upsert reads of an object's relations before it
// reads what it replaces (relReadFor), so the uid entry can vouch for
// them: the entry's hash mixes the E/ header's hash into the labels'
// (relMetaHash), and an update whose entry has the hash it would write
// (a status update) keeps its E/ entry without reading it.
type relUpsert struct {
	// read: relate reads the object (rd, its header and maybe edges;
	// doc, rd's document, when this goroutine read it); not: its kind
	// names nothing and it has no owner.
	read bool
	rd   *relRead
	doc  []byte
	fkey []byte
	// same: the stored E/ header is the one rd makes (previous: the uid
	// entry's hash is relMetaHash's); old, oldRead: the stored E/ value,
	// when previous read it.
	same    bool
	old     []byte
	oldRead bool
}

// relReadFor is what relate reads of obj, the object at (gvr, ns, name),
// before anything else of the upsert (the read-ahead's result, or read
// now); an error when obj cannot be read.
func (w *writer) relReadFor(gvr schema.GroupVersionResource, ns, name string, obj []byte) (relUpsert, error) {
	if w.s.noRelations {
		return relUpsert{}, nil
	}
	_, kindKnown := w.s.kinds.Load(kindSeen{gvr})
	gr := gvr.GroupResource()
	spec := relations.HasSpecRelations(gr)
	if kindKnown && !spec && !bytes.Contains(obj, ownerRefsMember) {
		return relUpsert{}, nil
	}
	ru := relUpsert{read: true, fkey: relKey(w.cluster, gvr, ns, name)}
	// Read ahead by the batch's workers (relate_pre.go), else here.
	if ru.rd = w.preRead(gvr, ns, name, obj); ru.rd == nil {
		ru.rd = &relRead{}
		ru.doc = w.relDoc.readHeader(ru.rd, gr, obj, spec)
	}
	return ru, ru.rd.err
}

// metaHash is what the uid entry keeps of an object whose labels and
// search text have lh (metaHash): lh, or with the relations read
// relMetaHash.
func (ru *relUpsert) metaHash(lh uint64) uint64 {
	if !ru.read {
		return lh
	}
	return relMetaHash(lh, ru.rd.h, ru.rd.uid)
}

// relMetaHash is lh mixed with an E/ header's hash and uid: equal
// hashes stand for equal labels, search text and E/ header (a Pod's
// header holds its labels, the hash covers the kind). An entry that
// holds lh alone was written without the relations (an older binary, a
// store without them), and its object's E/ entry is read as before.
func relMetaHash(lh, h uint64, uid string) uint64 {
	return mix64(lh ^ mix64(h^fnv1a(fnvOffset, uid)+1))
}

// sameMetaByRelations reports whether the uid entry's hash stored, not lh
// nor the one being written, is that of the object's labels and search
// text lh with its stored E/ header (an update that changed its
// relations, not its labels): it reads the E/ entry, which relate then
// takes, instead of the object's record.
func (w *writer) sameMetaByRelations(ru *relUpsert, lh, stored uint64) (bool, error) {
	old, err := w.relations(ru.fkey)
	if err != nil {
		return false, err
	}
	ru.old, ru.oldRead = old, true
	if len(old) < 8 {
		return false, nil
	}
	hd, _, err := cutRelHeader(old, false)
	if err != nil {
		return false, nil // relate reports it
	}
	return relMetaHash(lh, binary.BigEndian.Uint64(old), hd.uid) == stored, nil
}

// relate keeps the relations of the object at (gvr, ns, name) of the
// writer's cluster: it reads them from obj (ru: relReadFor's) and
// rewrites the E/, R/ and Q/ entries only when they changed
// (rewriteEdges: only the R/ and Q/ entries that changed). lbls are the
// object's labels, kept in the E/ entry of a Pod (what Related matches
// selectors against). mayExist is false for an object the store does not
// hold, whose old relations need not be read.
//
// What relations come from (kind, owner references, spec) is hashed and
// the hash leads the E/ entry: an update that keeps them (a status
// update, most updates) is recognized by the uid entry's hash
// (relMetaHash, ru.same), or one small read and the hash, without
// decoding anything. A kind the store has indexed that names
// nothing in its spec and has no "ownerReferences" in its bytes (most
// ConfigMaps, Secrets, Nodes) is not read at all.
func (w *writer) relate(gvr schema.GroupVersionResource, ns, name string, obj []byte, lbls map[string]string, mayExist bool, ru *relUpsert) error {
	if w.s.noRelations {
		return nil
	}
	gr := gvr.GroupResource()
	read, rd, doc := ru.read, ru.rd, ru.doc
	if read {
		if _, kindKnown := w.s.kinds.Load(kindSeen{gvr}); !kindKnown && rd.kind != "" {
			if err := w.set(kindKey(gvr.Group, rd.kind), encodeKind(gvr, ns == "")); err != nil {
				return err
			}
			w.s.kinds.Store(kindSeen{gvr}, true)
		}
		if ru.same {
			return nil // the uid entry vouches for the E/ header
		}
	}
	fkey := ru.fkey
	if fkey == nil {
		fkey = relKey(w.cluster, gvr, ns, name)
	}
	old := ru.old
	if mayExist && !ru.oldRead {
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
				doc = w.relDoc.readHeader(&x, gr, obj, relations.HasSpecRelations(gr))
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
// this batch, the batch in flight, then the snapshot.
func (w *writer) relations(fkey []byte) ([]byte, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.rels[string(fkey)]; ok {
			return st.v, nil
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
