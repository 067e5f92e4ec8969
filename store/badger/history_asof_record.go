package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
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
	obj, cells, lbls, err = fromRecordAt(txn, r, uid, cluster, gvr, at, newest, wantLabels, owned, owned)
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
// it), else what it returns of them is copied.
func fromRecordAt(txn *bdg.Txn, r record, uid, cluster string, gvr schema.GroupVersionResource, at []seqRev, newest, wantLabels, ownJSON, ownLabels bool) (obj, cells []byte, lbls map[string]string, err error) {
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
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return nil, false, err
			}
			r, err := decodeRevision(v)
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
				if first != nil {
					if stop, err := first(at[0]); stop || err != nil {
						return nil, false, err
					}
				}
			}
			at = append(at, sr)
			if r.prevWhole {
				return at, false, nil
			}
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
	var edits []labelEdit
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
					edits = append(edits, labelEdit{key: string(l.Key), remove: true})
				case v[0] == '"':
					s, err := rawjson.String(v)
					if err != nil {
						return 0, err
					}
					edits = append(edits, labelEdit{key: string(l.Key), value: s})
				default:
					ok = false
				}
				return end, nil
			})
			return end, err
		})
		return end, err
	})
	return edits, ok && err == nil
}
