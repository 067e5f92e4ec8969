package badger

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relations"
)

// An E/ value (encodeRelations) is a header, then the edges:
//
//	hash of what the relations were read from (relDoc), 8 bytes BE
//	kind, uid (length-prefixed), labels (appendLabels; a Pod's only)
//	the refs: a count, then each a type byte and four length-prefixed
//	strings (group, kind, namespace, name); the type byte also says which
//	form the edge's R/ key has: 'O', 'R' reverseKey's, 'o', 'r' (written
//	before 2026-12-07 13:00) oldReverseKey's, 'S' none (a Pod's reference
//	to a shared object, unkeyed; since 2026-12-07 15:00)
//	the selector's JSON (empty: none)
//
// The header is what a Related node shows of the object and what its
// selectors are matched against: a walk reads a neighbour's E/ entry, a
// small value the LSM tree keeps, and never the object's record in the
// value log. An object has an E/ entry only while the store holds it
// (deleteObject drops it with the object), so the entry also tells that
// it is cached. A Pod's five references take ~100 bytes where JSON took
// ~400, and every Pod has an entry.

var edgeCodes = map[relations.EdgeType]byte{relations.Owner: 'O', relations.References: 'R'}

// sharedCode is the type byte of a reference without an R/ key (unkeyed).
const sharedCode = 'S'

// unkeyed reports whether the edge ref of an object of gvr has no R/ key:
// a Pod's reference to an object every Pod of its namespace names
// (relations.Shared). A walk does not go through such an object to what
// else names it, so the key would be read only by a walk that starts
// from it, which finds the Pods naming it among its namespace's Pods
// (relWalk.sharedReferrers); a Pod's R/ keys were five in a benchdata
// Pod, four now.
func unkeyed(gvr schema.GroupVersionResource, ref relations.Ref) bool {
	return ref.Type == relations.References && gvr == podsGVR && relations.Shared(ref.Target.Group, ref.Target.Kind, ref.Target.Name)
}

// refForms are the type bytes of an E/ value's refs as stored, which say
// which R/ key each has; nil: every ref has reverseKey's.
type refForms []byte

// old: the ref's R/ key has the older form (oldReverseKey).
func (f refForms) old(i int) bool { return f != nil && (f[i] == 'o' || f[i] == 'r') }

// keyed: the ref has an R/ key (not unkeyed when written).
func (f refForms) keyed(i int) bool { return f == nil || f[i] != sharedCode }

// storedRelations is an E/ value's edges as stored: the relations, and
// per ref which R/ key it has.
type storedRelations struct {
	relations.Relations
	forms refForms
}

func (r storedRelations) old(i int) bool   { return r.forms.old(i) }
func (r storedRelations) keyed(i int) bool { return r.forms.keyed(i) }

// reverseKeyOf is the R/ key of the form old says.
func reverseKeyOf(old bool, cluster string, t relations.Target, typ relations.EdgeType, g schema.GroupVersionResource, ns, name string) []byte {
	if old {
		return oldReverseKey(cluster, t, typ, g, ns, name)
	}
	return reverseKey(cluster, t, typ, g, ns, name)
}

// relHeader is an E/ value's header. Each part is self-delimiting, so an
// old value that starts with the header has this header.
func relHeader(h uint64, kind, uid string, lbls map[string]string) []byte {
	b := make([]byte, 0, 8+len(kind)+len(uid)+labelsLen(lbls)+2*binary.MaxVarintLen64)
	b = binary.BigEndian.AppendUint64(b, h)
	b = appendString(appendString(b, kind), uid)
	return appendLabels(b, lbls)
}

// relHead is an E/ value's header, decoded.
type relHead struct {
	kind, uid string
	labels    map[string]string
}

// cutRelHeader reads an E/ value's header (its labels only when
// withLabels) and returns the edges after it.
func cutRelHeader(b []byte, withLabels bool) (relHead, []byte, error) {
	return cutRelHeaderWith(b, withLabels, func(s []byte) string { return string(s) })
}

// cutRelHeaderWith is cutRelHeader making the kind and the labels' keys
// and values by str (a Related walk interns them; uids do not repeat).
func cutRelHeaderWith(b []byte, withLabels bool, str func([]byte) string) (relHead, []byte, error) {
	var hd relHead
	if len(b) < 8 {
		return hd, nil, errCorrupt
	}
	kind, b, err := cutBytes(b[8:])
	if err != nil {
		return hd, nil, err
	}
	hd.kind = str(kind)
	if hd.uid, b, err = cutString(b); err != nil {
		return hd, nil, err
	}
	hd.labels, b, err = cutLabelsWith(b, withLabels, str)
	return hd, b, err
}

// encodeRelations is an E/ value of an object of gvr: head (relHeader),
// then rel's edges; sel is the selector's JSON at its end (empty: none).
func encodeRelations(gvr schema.GroupVersionResource, head []byte, rel relations.Relations) (v, sel []byte, err error) {
	n := len(head) + binary.MaxVarintLen64
	for _, r := range rel.Refs {
		n += 1 + len(r.Target.Group) + len(r.Target.Kind) + len(r.Target.Namespace) + len(r.Target.Name) + 4*binary.MaxVarintLen64
	}
	b := binary.AppendUvarint(append(make([]byte, 0, n), head...), uint64(len(rel.Refs)))
	for _, r := range rel.Refs {
		c, ok := edgeCodes[r.Type]
		if !ok {
			return nil, nil, fmt.Errorf("edge type %q cannot be stored", r.Type)
		}
		if unkeyed(gvr, r) {
			c = sharedCode
		}
		b = append(b, c)
		for _, s := range []string{r.Target.Group, r.Target.Kind, r.Target.Namespace, r.Target.Name} {
			b = appendString(b, s)
		}
	}
	if rel.Selector == nil {
		return b, nil, nil
	}
	js, err := json.Marshal(rel.Selector)
	if err != nil {
		return nil, nil, err
	}
	b = append(b, js...)
	return b, b[len(b)-len(js):], nil
}

// decodeRelations reads a whole E/ value's edges.
func decodeRelations(b []byte) (storedRelations, error) {
	_, rest, err := cutRelHeader(b, false)
	if err != nil {
		return storedRelations{}, err
	}
	return decodeEdges(rest)
}

// decodeEdges reads the edges that follow an E/ value's header.
func decodeEdges(b []byte) (storedRelations, error) {
	var rel storedRelations
	refs, forms, sel, err := cutRefs(b)
	if err != nil {
		return rel, err
	}
	rel.Refs, rel.forms = refs, forms
	if len(sel) > 0 {
		rel.Selector = &relations.Selector{}
		if err := json.Unmarshal(sel, rel.Selector); err != nil {
			return rel, fmt.Errorf("%w: selector: %v", errCorrupt, err)
		}
	}
	return rel, nil
}

// cutRefs reads the refs that follow an E/ value's header and returns,
// per ref, its type byte (nil: every ref's R/ key has reverseKey's form),
// and the selector's JSON after them (empty: none).
func cutRefs(b []byte) (refs []relations.Ref, forms refForms, sel []byte, err error) {
	return cutRefsInto(nil, b, func(s []byte) string { return string(s) })
}

// cutRefsInto is cutRefs appending the refs to buf[:0], each of their
// strings made by str: a Related walk reads a hundred Pods' refs that
// name the same few objects, and interns them.
func cutRefsInto(buf []relations.Ref, b []byte, str func([]byte) string) (refs []relations.Ref, forms refForms, sel []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, nil, nil, errCorrupt
	}
	b = b[w:]
	if buf == nil {
		refs = make([]relations.Ref, n)
	} else {
		refs = slices.Grow(buf[:0], int(n))[:n]
	}
	for i := range refs {
		if len(b) == 0 {
			return nil, nil, nil, errCorrupt
		}
		r := &refs[i]
		switch b[0] {
		case 'O', 'o':
			r.Type = relations.Owner
		case 'R', 'r', sharedCode:
			r.Type = relations.References
		default:
			return nil, nil, nil, errCorrupt
		}
		if b[0] != 'O' && b[0] != 'R' {
			if forms == nil {
				forms = make(refForms, n)
				for j := range forms {
					forms[j] = 'O' // a current key; only old and keyed read it
				}
			}
			forms[i] = b[0]
		}
		b = b[1:]
		for _, dst := range []*string{&r.Target.Group, &r.Target.Kind, &r.Target.Namespace, &r.Target.Name} {
			var v []byte
			if v, b, err = cutBytes(b); err != nil {
				return nil, nil, nil, err
			}
			*dst = str(v)
		}
	}
	return refs, forms, b, nil
}

// An R/ value (reverseValue) is the source's kind and uid, as its E/
// header has them: what a Related node shows of the source. At a walk's
// last hop the sources found through a target's R/ keys (the Pods on a
// Node, the Pods mounting a ConfigMap: most of a deep walk's nodes) are
// not expanded, so the walk takes them from the keys it scans and reads
// no E/ entry for them. The value changes with the source's header kind
// or uid (a name reused by a new uid), and then every R/ key of the
// source is rewritten. The uid is packed (appendUID: 17 bytes for a
// UUID); a key of the older form (oldReverseKey) has it as text, and
// before 2026-12-07 05:00 an empty value: the walk reads such a source
// from its E/ entry.

// reverseValue is an R/ value: the source's kind and uid.
func reverseValue(kind, uid string) []byte {
	return appendUID(appendString(make([]byte, 0, len(kind)+len(uid)+4), kind), uid)
}

// cutReverseValue reads an R/ value of a key of the form old says; ok
// false when it is empty (an older key's written before R/ values carried
// the source).
func cutReverseValue(v []byte, old bool) (kind, uid string, ok bool, err error) {
	k, u, ok, err := cutReverseValueBytes(v, old)
	if !ok || err != nil {
		return "", "", false, err
	}
	return string(k), uidText(u, old), true, nil
}

// cutReverseValueBytes is cutReverseValue in place: uid is as stored,
// uidText makes it the uid.
func cutReverseValueBytes(v []byte, old bool) (kind, uid []byte, ok bool, err error) {
	if len(v) == 0 && old {
		return nil, nil, false, nil
	}
	if kind, v, err = cutBytes(v); err != nil {
		return nil, nil, false, err
	}
	if old {
		if uid, v, err = cutBytes(v); err != nil || len(v) != 0 {
			return nil, nil, false, errCorrupt
		}
		return kind, uid, true, nil
	}
	// Checked, not decoded: most sources are in the answer already.
	if rest, err := skipUID(v); err != nil || len(rest) != 0 {
		return nil, nil, false, errCorrupt
	}
	return kind, v, true, nil
}

// uidText is the uid an R/ value holds as uid (cutReverseValueBytes).
func uidText(uid []byte, old bool) string {
	if old {
		return string(uid)
	}
	s, _, _ := cutUID(uid) // checked by cutReverseValueBytes
	return s
}

// rewriteEdges replaces the R/ and Q/ entries of the E/ value old (nil:
// none) by those of the new value: its header's kind and uid, its refs and
// its selector's JSON (empty: none), as relate has them, not read back
// from the value it encoded; rkeys, when not nil, are the refs' R/ keys.
// It writes only what differs: an update that changes what the relations
// are read from but not the edges nor the kind and uid (a container's
// image, a Pod's labels) writes no R/ or Q/ key. An old edge whose R/ key
// has the older form is rewritten in the current one, as the new E/ value
// says; an unkeyed edge has none, and an old key of one is deleted.
func (w *writer) rewriteEdges(gvr schema.GroupVersionResource, ns, name string, old []byte, kind, uid string, refs []relations.Ref, rkeys [][]byte, sel []byte) error {
	var oldRel storedRelations
	var oldSel []byte
	sameSource := false
	if old != nil {
		ohd, orest, err := cutRelHeader(old, false)
		if err == nil {
			oldRel.Refs, oldRel.forms, oldSel, err = cutRefs(orest)
		}
		if err != nil {
			return fmt.Errorf("relations of %s %s/%s: %w", gvr, ns, name, err)
		}
		sameSource = ohd.kind == kind && ohd.uid == uid
	}
	kept := func(r relations.Ref) bool { // r has its R/ key, of the current form
		i := slices.Index(oldRel.Refs, r)
		return i >= 0 && oldRel.keyed(i) && !oldRel.old(i)
	}
	for i, r := range oldRel.Refs {
		if !oldRel.keyed(i) {
			continue
		}
		if oldRel.old(i) || unkeyed(gvr, r) || !slices.Contains(refs, r) {
			if err := w.del(reverseKeyOf(oldRel.old(i), w.cluster, r.Target, r.Type, gvr, ns, name)); err != nil {
				return err
			}
		}
	}
	var rv []byte
	for i, r := range refs {
		if unkeyed(gvr, r) {
			continue
		}
		if !sameSource || !kept(r) {
			if rv == nil {
				rv = reverseValue(kind, uid)
			}
			var k []byte
			if rkeys != nil {
				k = rkeys[i] // built ahead (relate_pre.go)
			} else {
				k = reverseKey(w.cluster, r.Target, r.Type, gvr, ns, name)
			}
			if err := w.set(k, rv); err != nil {
				return err
			}
		}
	}
	switch {
	case bytes.Equal(sel, oldSel):
	case len(sel) == 0:
		return w.del(selectorKey(w.cluster, ns, gvr, name))
	default:
		return w.set(selectorKey(w.cluster, ns, gvr, name), bytes.Clone(sel))
	}
	return nil
}
