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
//	strings (group, kind, namespace, name)
//	the selector's JSON (empty: none)
//
// The header is what a Related node shows of the object and what its
// selectors are matched against: a walk reads a neighbour's E/ entry, a
// small value the LSM tree keeps, and never the object's record in the
// value log. An object has an E/ entry only while the store holds it
// (deleteObject drops it with the object), so the entry also tells that
// it is cached. A Pod's five references take ~100 bytes where JSON took
// ~400, and every Pod has an entry.

var edgeCodes = map[relations.EdgeType]byte{relations.Owner: 'o', relations.References: 'r'}

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
	var hd relHead
	if len(b) < 8 {
		return hd, nil, errCorrupt
	}
	var err error
	if hd.kind, b, err = cutString(b[8:]); err != nil {
		return hd, nil, err
	}
	if hd.uid, b, err = cutString(b); err != nil {
		return hd, nil, err
	}
	hd.labels, b, err = cutLabels(b, withLabels)
	return hd, b, err
}

// encodeRelations is an E/ value: head (relHeader), then rel's edges; sel
// is the selector's JSON at its end (empty: none).
func encodeRelations(head []byte, rel relations.Relations) (v, sel []byte, err error) {
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
func decodeRelations(b []byte) (relations.Relations, error) {
	_, rest, err := cutRelHeader(b, false)
	if err != nil {
		return relations.Relations{}, err
	}
	return decodeEdges(rest)
}

// decodeEdges reads the edges that follow an E/ value's header.
func decodeEdges(b []byte) (relations.Relations, error) {
	var rel relations.Relations
	refs, sel, err := cutRefs(b)
	if err != nil {
		return rel, err
	}
	rel.Refs = refs
	if len(sel) > 0 {
		rel.Selector = &relations.Selector{}
		if err := json.Unmarshal(sel, rel.Selector); err != nil {
			return rel, fmt.Errorf("%w: selector: %v", errCorrupt, err)
		}
	}
	return rel, nil
}

// cutRefs reads the refs that follow an E/ value's header and returns the
// selector's JSON after them (empty: none).
func cutRefs(b []byte) ([]relations.Ref, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, nil, errCorrupt
	}
	b = b[w:]
	refs := make([]relations.Ref, n)
	for i := range refs {
		if len(b) == 0 {
			return nil, nil, errCorrupt
		}
		r := &refs[i]
		switch b[0] {
		case 'o':
			r.Type = relations.Owner
		case 'r':
			r.Type = relations.References
		default:
			return nil, nil, errCorrupt
		}
		b = b[1:]
		for _, dst := range []*string{&r.Target.Group, &r.Target.Kind, &r.Target.Namespace, &r.Target.Name} {
			var err error
			if *dst, b, err = cutString(b); err != nil {
				return nil, nil, err
			}
		}
	}
	return refs, b, nil
}

// An R/ value (reverseValue) is the source's kind and uid, as its E/
// header has them: what a Related node shows of the source. At a walk's
// last hop the sources found through a target's R/ keys (the Pods on a
// Node, the Pods mounting a ConfigMap: most of a deep walk's nodes) are
// not expanded, so the walk takes them from the keys it scans and reads
// no E/ entry for them. The value changes with the source's header kind
// or uid (a name reused by a new uid), and then every R/ key of the
// source is rewritten. R/ values written before 2026-12-07 are empty: the
// walk reads such a source from its E/ entry, as before.

// reverseValue is an R/ value: the source's kind and uid.
func reverseValue(kind, uid string) []byte {
	return appendString(appendString(make([]byte, 0, len(kind)+len(uid)+4), kind), uid)
}

// cutReverseValue reads an R/ value; ok false when it is empty (written
// before R/ values carried the source).
func cutReverseValue(v []byte) (kind, uid string, ok bool, err error) {
	if len(v) == 0 {
		return "", "", false, nil
	}
	if kind, v, err = cutString(v); err != nil {
		return "", "", false, err
	}
	if uid, v, err = cutString(v); err != nil || len(v) != 0 {
		return "", "", false, errCorrupt
	}
	return kind, uid, true, nil
}

// rewriteEdges replaces the R/ and Q/ entries of the E/ value old (nil:
// none) by those of the new value: its header's kind and uid, its refs and
// its selector's JSON (empty: none), as relate has them, not read back
// from the value it encoded; rkeys, when not nil, are the refs' R/ keys. It writes only what differs: an update that
// changes what the relations are read from but not the edges nor the kind
// and uid (a container's image, a Pod's labels) writes no R/ or Q/ key.
func (w *writer) rewriteEdges(gvr schema.GroupVersionResource, ns, name string, old []byte, kind, uid string, refs []relations.Ref, rkeys [][]byte, sel []byte) error {
	var oldRefs []relations.Ref
	var oldSel []byte
	sameSource := false
	if old != nil {
		ohd, orest, err := cutRelHeader(old, false)
		if err == nil {
			oldRefs, oldSel, err = cutRefs(orest)
		}
		if err != nil {
			return fmt.Errorf("relations of %s %s/%s: %w", gvr, ns, name, err)
		}
		sameSource = ohd.kind == kind && ohd.uid == uid
	}
	for _, r := range oldRefs {
		if !slices.Contains(refs, r) {
			if err := w.del(reverseKey(w.cluster, r.Target, r.Type, gvr, ns, name)); err != nil {
				return err
			}
		}
	}
	var rv []byte
	for i, r := range refs {
		if !sameSource || !slices.Contains(oldRefs, r) {
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
