package badger

import (
	"bytes"
	"encoding/json"
	"errors"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// uidLookup is a uid entry already read (uidEntry), ok when it exists.
type uidLookup struct {
	u  uidState
	ok bool
}

// previous is the object at key that an upsert of the uid at ukey, with
// labels lbls (lh their metaHash with the search text; uh what the uid
// entry keeps, with the relations ru: relUpsert.metaHash), replaces. An
// update that keeps its labels and annotations (most do: status changes)
// learns that from the uid index, a
// small value the LSM tree keeps, and does not read the object's record
// from the value log, whose pages the recycler dropped long ago.
func (w *writer) previous(gvr schema.GroupVersionResource, key, ukey []byte, uid string, lbls map[string]string, lh, uh uint64, pre *uidLookup, ru *relUpsert) (objState, bool, error) {
	if st, ok := w.unread(key); ok {
		return st, !st.gone, nil
	}
	var u uidState
	var ok bool
	if pre != nil {
		u, ok = pre.u, pre.ok
	} else {
		var err error
		if u, ok, err = w.uidEntry(gvr, ukey); err != nil {
			return objState{}, false, err
		}
	}
	if ok && bytes.Equal(u.obj, key) {
		same := u.metaHash == lh // an entry without the relations' hash
		if ru.read && !same {
			if u.metaHash == uh {
				same, ru.same = true, true
			} else {
				var err error
				if same, err = w.sameMetaByRelations(ru, lh, u.metaHash); err != nil {
					return objState{}, false, err
				}
			}
		}
		if same {
			return objState{uid: uid, labels: lbls, sameMeta: true}, true, nil
		}
		st, exists, err := w.stored(key, false) // the labels changed: read the old ones
		st.uid = uid
		return st, exists, err
	}
	// A name reused by a new uid.
	return w.stored(key, true)
}

// object is the newest state of the object at key: its labels, and its uid
// when withUID (which costs decoding the stored JSON).
func (w *writer) object(key []byte, withUID bool) (objState, bool, error) {
	if st, ok := w.unread(key); ok {
		return st, !st.gone, nil
	}
	return w.stored(key, withUID)
}

// unread is the state of key when it is known without reading the store:
// what this batch or the one in flight did to it, or its absence when the
// filter of written keys vouches for that.
func (w *writer) unread(key []byte) (objState, bool) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.objs[string(key)]; ok {
			return st, true
		}
	}
	if w.known != nil && !w.known.mayHave(key) {
		return objState{gone: true}, true
	}
	return objState{}, false
}

// stored reads the object at key from the transaction's snapshot.
func (w *writer) stored(key []byte, withUID bool) (objState, bool, error) {
	it, err := w.txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return objState{gone: true}, false, nil
	}
	if err != nil {
		return objState{}, false, err
	}
	var st objState
	err = it.Value(func(v []byte) error {
		r, err := decodeRecord(v, true)
		if err != nil {
			return err
		}
		st.labels = r.labels
		if withUID {
			var m struct {
				Metadata struct {
					UID string `json:"uid"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(r.json, &m); err != nil {
				return err
			}
			st.uid = m.Metadata.UID
		}
		return nil
	})
	return st, err == nil, err
}

// uidEntry is the uid index's entry at ukey: the primary key of the
// object that has the uid and a hash of its labels. An entry exists
// exactly while the object at its key has its uid (an upsert that reuses
// the name for a new uid deletes the old uid's entry), so a delete by uid
// need not decode the object's JSON to check.
func (w *writer) uidEntry(gvr schema.GroupVersionResource, ukey []byte) (uidState, bool, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.uids[string(ukey)]; ok {
			return st, !st.gone, nil
		}
	}
	it, err := w.txn.Get(ukey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return uidState{}, false, nil
	}
	if err != nil {
		return uidState{}, false, err
	}
	var u uidState
	err = it.Value(func(v []byte) (err error) {
		u, err = decodeUIDEntry(v, gvr, w.cluster)
		return err
	})
	return u, err == nil, err
}
