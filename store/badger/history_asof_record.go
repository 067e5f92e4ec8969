package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// recordAt is objectAt for an object whose record names the uid that was
// there at t, read from the record first: the uid is the record's own
// (its metadata), so the name's uids (n/) are not sought, and the labels
// then are the record's with the reverse patches' label changes undone,
// so the rebuilt state is not read again for them. ok is false when the
// record cannot answer (no record, its uid not there at t, a record
// written after the newest revision it would be patched back from):
// the caller asks objectAt. With every object of a list changed since t
// (an as-of list of a churned resource), this is the path of nearly all.
// lbls is nil when wantLabels is false. A chain that reaches a state kept
// whole needs no record (its uid is all it reads from it).
func recordAt(txn *bdg.Txn, h *histIters, key []byte, cluster string, gvr schema.GroupVersionResource, t int64, wantLabels bool) (obj, cells []byte, lbls map[string]string, ok bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, nil, false, err
	}
	err = item.Value(func(v []byte) error {
		r, err := decodeRecord(v, wantLabels)
		if err != nil {
			return err
		}
		uid, found := recordUID(r)
		if !found {
			return nil
		}
		obj, cells, lbls, ok, err = fromRecord(txn, h, r, uid, nil, cluster, gvr, t, wantLabels, false)
		return err
	})
	if err != nil || !ok {
		return nil, nil, nil, false, err
	}
	return obj, cells, lbls, true, nil
}

// fromRecord is recordAt given the record r, which names uid, and the
// uid's revPrefix (nil: made here); owned says r's bytes are the
// caller's to keep (a copy it made), so the answer may be them, else
// what it returns of them is copied.
func fromRecord(txn *bdg.Txn, h *histIters, r record, uid string, prefix []byte, cluster string, gvr schema.GroupVersionResource, t int64, wantLabels, owned bool) (obj, cells []byte, lbls map[string]string, ok bool, err error) {
	if prefix == nil {
		prefix = revPrefix(cluster, gvr, uid)
	}
	at, newest, err := h.revisionsUnder(h.textRevPrefix(cluster, gvr, uid), prefix, t, nil)
	if err != nil || !recordAnswers(at, newest, r.seq) {
		return nil, nil, nil, false, err
	}
	obj, cells, lbls, err = fromRecordAt(txn, &h.ar, r, uid, cluster, gvr, at, newest, wantLabels, owned, owned)
	return obj, cells, lbls, err == nil, err
}

// recordAnswers says whether the uid's revisions at t (revisionsUnder)
// and its record, written by the event of stream sequence seq, give its
// state then: it was there at t, and the record is the newest
// revision's state when the rebuild patches back from it.
func recordAnswers(at []seqRev, newest bool, seq uint64) bool {
	return len(at) > 0 && at[0].r.typ != query.ChangeDeleted && (!newest || at[len(at)-1].seq == seq)
}

// fromRecordAt is fromRecord given the uid's revisions at t, for which
// recordAnswers holds; ownJSON and ownLabels say r's bytes and its
// labels are the caller's to keep (a copy it made; labels decoded for
// it), else what it returns of them is copied; ar, when set, holds a
// state rebuilt by one patch.
func fromRecordAt(txn *bdg.Txn, ar *arena, r record, uid, cluster string, gvr schema.GroupVersionResource, at []seqRev, newest, wantLabels, ownJSON, ownLabels bool) (obj, cells []byte, lbls map[string]string, err error) {
	if newest && len(at) == 1 {
		// Unchanged since t: the record is the answer.
		if ownJSON {
			return r.json, r.cells, r.labels, nil
		}
		return bytes.Clone(r.json), bytes.Clone(r.cells), r.labels, nil
	}
	known := false
	if wantLabels && newest {
		lbls, known = labelsBefore(r.labels, at, ownLabels)
	}
	if nx := at[len(at)-1].r; ar != nil && newest && len(at) == 2 && at[0].r.own == nil && nx.own == nil &&
		nx.prev != nil && !nx.prevWhole && string(nx.prev) != "{}" {
		// One reverse patch back from the record (every object of a
		// list changed once since t): resolveStatesFrom's patch, made in
		// ar.
		st, err := applyReverseTo(ar.room(len(r.json)+len(nx.prev)), r.json, nx.prev, r.row.Metadata)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("revision %s/%d: %w", uid, at[0].seq, err)
		}
		obj = ar.kept(st)
	} else {
		var cur []byte
		var md rawjson.Span
		if newest {
			cur, md = r.json, r.row.Metadata
		}
		if obj, err = resolveFirst(txn, cluster, gvr, uid, at, newest, cur, md); err != nil {
			return nil, nil, nil, err
		}
		if !ownJSON && newest && len(obj) > 0 && &obj[0] == &r.json[0] {
			obj = bytes.Clone(obj) // no patch changed it: the record's own bytes
		}
	}
	if wantLabels && !known {
		// A state kept whole on the way back: its labels are read.
		if lbls, err = rawjson.CheckedLabels(obj); err != nil {
			return nil, nil, nil, err
		}
	}
	return obj, nil, lbls, nil
}

// recordUID is metadata.uid of the record's object, read through its
// metadata member (found when it was stored); found is false when it
// cannot be read so (no metadata span, no plain string uid).
func recordUID(r record) (string, bool) {
	md := r.row.Metadata
	if md.End <= md.Start || md.End > len(r.json) {
		return "", false
	}
	var uid []byte
	_, err := rawjson.EachMember(r.json, md.Start, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(r.json, m.ValueStart)
		if err == nil && string(m.Key) == "uid" && r.json[m.ValueStart] == '"' {
			// The first string uid is the answer: the members after it
			// (a Pod's managedFields, most of its metadata's bytes) are
			// not read, as FindRowSpans stops after the metadata.
			uid = r.json[m.ValueStart+1 : end-1]
			return end, errUIDRead
		}
		return end, err
	})
	if errors.Is(err, errUIDRead) {
		err = nil
	}
	if err != nil || len(uid) == 0 || bytes.IndexByte(uid, '\\') >= 0 {
		return "", false
	}
	return string(uid), true
}

// revisionsAt reads the uid's revisions as uidAt does: at is the revision
// in force at t, then the newer ones its state is patched back from, up
// to the first holding the state before it whole; newest says at ends
// with the uid's newest revision. at is nil when no revision of the uid
// is in force at t. first, when not nil, is told the revision in force
// as soon as the first newer one is met: when it says stop, nothing more
// is read and at is nil (uidAt decides some objects from it alone).
func (h *histIters) revisionsAt(cluster string, gvr schema.GroupVersionResource, uid string, t int64, first func(seqRev) (stop bool, err error)) (at []seqRev, newest bool, err error) {
	return h.revisionsUnder(h.textRevPrefix(cluster, gvr, uid), revPrefix(cluster, gvr, uid), t, first)
}

// room is an empty buffer with room for n bytes at the end of a's
// chunk, for a copy made by appends that kept takes into the chunk.
func (a *arena) room(n int) []byte {
	if n > arenaMost/4 {
		return make([]byte, 0, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.next = min(max(a.next*2, arenaFirst), arenaMost)
		a.buf = make([]byte, 0, a.next)
	}
	return a.buf[len(a.buf) : len(a.buf) : len(a.buf)+n]
}

// kept is b, appended in room's buffer, made part of a's chunk when it
// is still there (an append past the room moved it), and full: appending
// to it copies, never overwrites what the chunk holds next.
func (a *arena) kept(b []byte) []byte {
	if n := len(a.buf); len(b) > 0 && cap(a.buf) > n && &b[0] == &a.buf[:n+1][n] {
		a.buf = a.buf[:n+len(b)]
	}
	return b[:len(b):len(b)]
}

// keep is sr, read into h's scratch, read again from a copy in h's arena.
func (h *histIters) keep(sr seqRev) (seqRev, error) {
	r, err := decodeRevisionOf(h.ar.clone(h.scratch), false)
	return seqRev{sr.seq, r}, err
}

// revisionsUnder is revisionsAt given the uid's revision prefixes: text,
// the older form's (nil: none to read), and rev, revPrefix's.
func (h *histIters) revisionsUnder(text, rev []byte, t int64, first func(seqRev) (stop bool, err error)) (at []seqRev, newest bool, err error) {
	s := h.revs
	it := s.it
	past := false
	for _, prefix := range [2][]byte{text, rev} {
		if prefix == nil {
			continue
		}
		for s.seek(prefix); it.ValidForPrefix(prefix); s.next() {
			// A revision in force at t may be followed by another: its
			// value is read into h's scratch until the first one after
			// t shows it is the one, and only then copied to keep (the
			// revisions kept go to h's arena, not an allocation each).
			var r revision
			err := it.Item().Value(func(v []byte) error {
				if !past && (len(v) < 10 || int64(binary.BigEndian.Uint64(v[2:10])) <= t) {
					// decodeRevision's time, or a value it refuses.
					h.scratch = append(h.scratch[:0], v...)
					v = h.scratch
				} else {
					v = h.ar.clone(v)
				}
				var err error
				r, err = decodeRevisionOf(v, false)
				return err
			})
			if err != nil {
				return nil, false, err
			}
			sr := seqRev{binary.BigEndian.Uint64(it.Item().Key()[len(prefix):]), r}
			if !past && r.time <= t {
				at = append(at[:0], sr)
				continue
			}
			if !past {
				past = true
				if len(at) == 0 {
					return nil, false, nil
				}
				if at[0], err = h.keep(at[0]); err != nil {
					return nil, false, err
				}
				if first != nil {
					if stop, err := first(at[0]); stop || err != nil {
						return nil, false, err
					}
				}
			}
			at = append(at, sr)
			if sr.r.prevWhole {
				return at, false, nil
			}
		}
	}
	if !past && len(at) > 0 {
		if at[0], err = h.keep(at[0]); err != nil {
			return nil, false, err
		}
	}
	return at, true, nil
}

// labelsBefore are the labels of at[0]'s state, given now, those of the
// newest's: each reverse patch's label changes undone, newest first; ok
// is false when a patch says more than label edits (a state kept whole,
// labels or metadata replaced or removed, an escaped key). owned says now
// is the caller's to change (a record's labels decoded for it, not read
// again after this): the edits are made in it, not in a copy (a map
// allocated per object of a relabelled list); with ok false it is then
// left half-edited.
func labelsBefore(now map[string]string, at []seqRev, owned bool) (map[string]string, bool) {
	lbls := now
	copied := owned
	for i := len(at) - 1; i >= 1; i-- {
		p := at[i].r.prev
		if at[i].r.prevWhole || p == nil {
			return nil, false
		}
		if string(p) == "{}" {
			continue
		}
		edits, ok := labelEdits(p)
		if !ok {
			return nil, false
		}
		for _, e := range edits {
			if !copied {
				lbls, copied = maps.Clone(lbls), true
			}
			if lbls == nil {
				lbls = map[string]string{}
			}
			if e.remove {
				delete(lbls, e.key)
			} else {
				lbls[e.key] = e.value
			}
		}
	}
	return lbls, true
}

type labelEdit struct {
	key, value string
	remove     bool
}

// labelEdits are the members of a merge patch's metadata.labels; ok is
// false when the patch replaces or removes metadata or labels whole, or
// a key or value is not a plain string.
func labelEdits(patch []byte) ([]labelEdit, bool) {
	var buf [4]rawLabelEdit
	raw, ok := appendRawLabelEdits(buf[:0], patch)
	if !ok {
		return nil, false
	}
	edits := make([]labelEdit, len(raw))
	for i, e := range raw {
		edits[i] = labelEdit{key: string(e.key), value: string(e.value), remove: e.remove}
	}
	return edits, true
}

// rawLabelEdit is a labelEdit read in place: key and value are the
// patch's own bytes (value unquoted; a key or value with an escape is
// not read so).
type rawLabelEdit struct {
	key, value []byte
	remove     bool
}

// appendRawLabelEdits appends the members of a merge patch's
// metadata.labels to dst, in the patch's order; ok is false when the
// patch replaces or removes metadata or labels whole, or a key or value
// is not a plain string without escapes.
func appendRawLabelEdits(dst []rawLabelEdit, patch []byte) ([]rawLabelEdit, bool) {
	ok := true
	_, err := rawjson.EachMember(patch, 0, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(patch, m.ValueStart)
		if err != nil || string(m.Key) != "metadata" {
			return end, err
		}
		if patch[m.ValueStart] != '{' {
			ok = false
			return end, nil
		}
		_, err = rawjson.EachMember(patch, m.ValueStart, func(m rawjson.Member) (int, error) {
			end, err := rawjson.SkipValue(patch, m.ValueStart)
			if err != nil || string(m.Key) != "labels" {
				return end, err
			}
			if patch[m.ValueStart] != '{' {
				ok = false
				return end, nil
			}
			_, err = rawjson.EachMember(patch, m.ValueStart, func(l rawjson.Member) (int, error) {
				end, err := rawjson.SkipValue(patch, l.ValueStart)
				if err != nil {
					return end, err
				}
				v := patch[l.ValueStart:end]
				switch {
				case bytes.IndexByte(l.Key, '\\') >= 0:
					ok = false
				case string(v) == "null":
					dst = append(dst, rawLabelEdit{key: l.Key, remove: true})
				case v[0] == '"' && len(v) >= 2 && bytes.IndexByte(v, '\\') < 0:
					dst = append(dst, rawLabelEdit{key: l.Key, value: v[1 : len(v)-1]})
				case v[0] == '"':
					// An escape: its value is the decoded string.
					s, err := rawjson.String(v)
					if err != nil {
						return 0, err
					}
					dst = append(dst, rawLabelEdit{key: l.Key, value: []byte(s)})
				default:
					ok = false
				}
				return end, nil
			})
			return end, err
		})
		return end, err
	})
	return dst, ok && err == nil
}

// labelsThen are the labels of at[0]'s state (labelsBefore) seen through
// the newest state's labels as its record encodes them (raw: the labels
// part of the record, recordLabels) and the reverse patches' label edits,
// without a map: an as-of list's selector looks up a key or two of each
// changed object, and decoding every label into a map and editing it cost
// more than the rebuild's patch (the hub's profile, docs/benchmarks/
// history.md). It is a labels.Labels for a selector's Matches.
type labelsThen struct {
	raw []byte
	// edits in the order labelsBefore applies them: the last one naming
	// a key decides it.
	edits []rawLabelEdit
}

// set makes l the labels of at[0]'s state given raw, the
// newest state's encoded labels, reusing l's edits; ok is false when
// labelsBefore could not tell them (a state kept whole on the way back,
// labels or metadata replaced or removed, an escaped key).
func (l *labelsThen) set(raw []byte, at []seqRev) bool {
	l.raw, l.edits = raw, l.edits[:0]
	for i := len(at) - 1; i >= 1; i-- {
		p := at[i].r.prev
		if at[i].r.prevWhole || p == nil {
			return false
		}
		if string(p) == "{}" {
			continue
		}
		var ok bool
		if l.edits, ok = appendRawLabelEdits(l.edits, p); !ok {
			return false
		}
	}
	return true
}

// Lookup is the label's value then, and whether it was there.
func (l *labelsThen) Lookup(key string) (string, bool) {
	for i := len(l.edits) - 1; i >= 0; i-- {
		if e := &l.edits[i]; string(e.key) == key {
			if e.remove {
				return "", false
			}
			return string(e.value), true
		}
	}
	v, ok := rawLabel(l.raw, key)
	if !ok {
		return "", false
	}
	return string(v), true
}

func (l *labelsThen) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

func (l *labelsThen) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// recordLabels is the labels part of a record's value (cutLabels reads
// it), not decoded.
func recordLabels(v []byte) ([]byte, error) {
	if len(v) < 8 {
		return nil, errCorrupt
	}
	_, rest, err := cutLabels(v[8:], false)
	if err != nil {
		return nil, err
	}
	return v[8 : len(v)-len(rest)], nil
}

// rawLabel is the value of key among a record's encoded labels
// (recordLabels), read in place; ok is false when key is not there or
// the labels do not decode.
func rawLabel(raw []byte, key string) (value []byte, ok bool) {
	n, w := binary.Uvarint(raw)
	if w <= 0 {
		return nil, false
	}
	b := raw[w:]
	for range n {
		var k, v []byte
		var err error
		if k, b, err = cutBytes(b); err != nil {
			return nil, false
		}
		if v, b, err = cutBytes(b); err != nil {
			return nil, false
		}
		if string(k) == key {
			return v, true
		}
	}
	return nil, false
}
