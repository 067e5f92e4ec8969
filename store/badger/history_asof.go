package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// uidsOf are the uids the history knows under the object's name.
func uidsOf(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, ns, name string) []string {
	prefix := namePrefix(cluster, gvr, ns, name)
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var uids []string
	for it.Rewind(); it.Valid(); it.Next() {
		uids = append(uids, string(it.Item().Key()[len(prefix):]))
	}
	return uids
}

// histIters are iterators over the name index (n/) and the revisions
// (r/), made once per reader of many objects and sought per object: an
// as-of list rebuilds objects by the hundred on a few workers, and
// making an iterator (one per memtable and table level) cost about as
// much as its seek. Each is a seeker: objects taken in the order of
// their keys there (an as-of list's, by name for n/ and by uid for r/:
// asOfMerge.judgeByRecord) step to the next one with Next instead of a
// seek in every table. Revision values are read as they are met (no
// prefetch: the family's next values are other objects').
type histIters struct {
	names, revs *seeker
	// objs, made on first use (objSeeker), reads an as-of list's
	// records in key order.
	objs *seeker
	// allPacked: the store's r/ keys all have the packed uid form
	// (packedRevsKey), read once for the snapshot, not per object.
	allPacked bool
	// ar holds the revision values revisionsUnder keeps (their states
	// and patches are slices of them), scratch the one it is reading;
	// interned the namespaces and clusters of an as-of list's tails
	// (admits): a few strings shared by thousands of objects.
	ar       arena
	scratch  []byte
	interned map[string]string
}

// intern is b as a string, one per distinct b for h's life.
func (h *histIters) intern(b []byte) string {
	if s, ok := h.interned[string(b)]; ok {
		return s
	}
	if h.interned == nil {
		h.interned = map[string]string{}
	}
	s := string(b)
	h.interned[s] = s
	return s
}

func newHistIters(txn *bdg.Txn) *histIters {
	// A failed read leaves allPacked false: both forms are then sought,
	// which costs a seek, never an answer.
	_, err := txn.Get(packedRevsKey)
	return &histIters{
		names:     newSeekerIn(txn, []byte{'n', sep}),
		revs:      newSeekerIn(txn, []byte{'r', sep}),
		allPacked: err == nil,
	}
}

// objSeeker is h's seeker over the records of the resource whose
// object prefix is prefix, made on first use (the first caller's
// resource: an as-of list reads one).
func (h *histIters) objSeeker(txn *bdg.Txn, prefix []byte) *seeker {
	if h.objs == nil {
		h.objs = newSeekerIn(txn, prefix)
	}
	return h.objs
}

// textRevPrefix is textRevPrefix (history_format.go) with the store's
// form read once.
func (h *histIters) textRevPrefix(cluster string, g schema.GroupVersionResource, uid string) []byte {
	if h.allPacked || packUID(uid) == nil {
		return nil
	}
	return textRevPrefixOf(cluster, g, uid)
}

func (h *histIters) close() {
	h.names.close()
	h.revs.close()
	if h.objs != nil {
		h.objs.close()
	}
}

// uidsOf is uidsOf read through h's name seeker.
func (h *histIters) uidsOf(cluster string, gvr schema.GroupVersionResource, ns, name string) []string {
	prefix := namePrefix(cluster, gvr, ns, name)
	var uids []string
	_ = h.names.each(prefix, func(key []byte, _ *bdg.Item) error {
		uids = append(uids, string(key[len(prefix):]))
		return nil
	})
	return uids
}

// eachRevision calls fn with each kept revision of the uid, oldest first,
// and the object's state after it.
func eachRevision(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, fn func(seq uint64, r revision, state []byte) (bool, error)) error {
	var revs []seqRev
	err := scanRevisions(txn, cluster, gvr, uid, 0, true, func(seq uint64, item *bdg.Item) (bool, error) {
		v, err := item.ValueCopy(nil)
		if err != nil {
			return false, err
		}
		r, err := decodeRevision(v)
		if err != nil {
			return false, err
		}
		revs = append(revs, seqRev{seq, r})
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(revs) == 0 {
		return nil
	}
	states, err := resolveStates(txn, cluster, gvr, uid, revs, true)
	if err != nil {
		return err
	}
	for i, sr := range revs {
		if more, err := fn(sr.seq, sr.r, states[i]); err != nil || !more {
			return err
		}
	}
	return nil
}

// What uidAt found of a uid at a time.
type atFound int

const (
	atAbsent     atFound = iota // not there then (not yet, or deleted)
	atState                     // there, in the state returned
	atStored                    // there, as the stored object is now
	atUnselected                // there, its labels then not selected
)

// uidAt is the uid's state at t from its revisions: the state after the
// last revision observed before the first one observed after t. It reads
// the uid's revisions only up to the first that holds the state it needs
// whole (as stateAt does), and patches back only the revisions after the
// one in force at t, not the older ones. When the state is the stored
// object's (the uid's newest revision, which holds none, is the one in
// force at t) it says so and the caller reads the record. A selector
// (nil: none) is matched first against the labels the change feed (t/)
// kept with the revision in force, so an object its list leaves out is
// not rebuilt (most, when a list selects a tenth of its resource and
// nearly every object changed since); without that entry (a baseline
// revision, one retention kept past the window) the caller matches the
// rebuilt state.
//
// key, when set, is the object's record: the newest state a rebuild
// patches back from is read from it, without the uid index, when the
// record was written by the newest revision's event (its seq).
func uidAt(txn *bdg.Txn, h *histIters, cluster string, gvr schema.GroupVersionResource, uid string, t int64, sel labels.Selector, key []byte) ([]byte, atFound, error) {
	// Decided from the revision in force alone, before the newer ones
	// are read: deleted then, its own state kept whole, or left out by
	// the selector on the labels the change feed kept with it.
	var early []byte
	found := atState
	stopped := false
	at, newest, err := h.revisionsAt(cluster, gvr, uid, t, func(a seqRev) (bool, error) {
		switch {
		case a.r.typ == query.ChangeDeleted:
			found, stopped = atAbsent, true
		case a.r.own != nil:
			early, stopped = a.r.own, true
		case sel != nil && !sel.Empty():
			lbls, ok, err := changeLabels(txn, cluster, uid, a)
			if err != nil {
				return true, err
			}
			if ok && !sel.Matches(labels.Set(lbls)) {
				found, stopped = atUnselected, true
			}
		}
		return stopped, nil
	})
	if err != nil {
		return nil, atAbsent, err
	}
	if stopped {
		return early, found, nil
	}
	switch {
	case len(at) == 0 || at[0].r.typ == query.ChangeDeleted:
		return nil, atAbsent, nil
	case len(at) == 1 && newest && at[0].r.own == nil:
		return nil, atStored, nil
	}
	if newest && key != nil && at[len(at)-1].r.own == nil {
		// The record's JSON is patched back inside the read, not copied
		// first (a rebuilt object's state is a new buffer anyway).
		var st []byte
		ok, err := withRecord(txn, key, at[len(at)-1].seq, func(cur []byte) error {
			var err error
			if st, err = resolveFirst(txn, cluster, gvr, uid, at, true, cur, rawjson.Span{}); err != nil {
				return err
			}
			if len(st) > 0 && &st[0] == &cur[0] {
				st = bytes.Clone(st) // no patch changed it: the record's own bytes
			}
			return nil
		})
		if err != nil || ok {
			return st, atState, err
		}
	}
	st, err := resolveFirst(txn, cluster, gvr, uid, at, newest, nil, rawjson.Span{})
	if err != nil {
		return nil, atAbsent, err
	}
	return st, atState, nil
}

// withRecord calls fn with the JSON of the record at key, valid during
// the call, when the record was written by the event of stream sequence
// seq; ok is false when it was not (or there is none), and fn is not
// called.
func withRecord(txn *bdg.Txn, key []byte, seq uint64, fn func(json []byte) error) (ok bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = item.Value(func(v []byte) error {
		r, err := decodeRecord(v, false)
		if err != nil || r.seq != seq {
			return err
		}
		ok = true
		return fn(r.json)
	})
	return ok, err
}

// changeLabels are the labels of the uid's state after revision sr, as
// the change feed's entry of that revision (t/) holds them; ok is false
// when there is no such entry.
func changeLabels(txn *bdg.Txn, cluster, uid string, sr seqRev) (map[string]string, bool, error) {
	item, err := txn.Get(timeKey('t', sr.r.time, cluster, sr.seq))
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var c changeEntry
	if err := item.Value(func(v []byte) (err error) {
		c, err = decodeChange(v, true)
		return err
	}); err != nil {
		return nil, false, err
	}
	if err := resolveLabels(txn, &c, sr.r.time, cluster, nil); err != nil {
		return nil, false, err
	}
	return c.labels, c.uid == uid, nil
}

// objectAt is the object named (cluster, namespace, name) as it was at t,
// with its Table cells when the stored object is that state (unchanged
// since t: the member printed them for it); a state rebuilt from the
// history has none (the history keeps objects, not printed cells). It
// reads the revisions of the uids the history knows under the name; the
// stored object's record only when it is the answer or the newest state a
// rebuild patches back from, and no object's JSON for its uid. With a
// selector (nil: none), an object whose labels then the change feed
// shows it does not match is nil without being rebuilt; the caller
// matches what is returned.
func objectAt(txn *bdg.Txn, h *histIters, cluster string, gvr schema.GroupVersionResource, ns, name string, t int64, sel labels.Selector) (obj, cells []byte, err error) {
	key := objKey(gvr, ns, name, cluster)
	uids := h.uidsOf(cluster, gvr, ns, name)
	for _, uid := range uids {
		st, found, err := uidAt(txn, h, cluster, gvr, uid, t, sel, key)
		switch {
		case err != nil:
			return nil, nil, err
		case found == atStored:
			return storedRecord(txn, key) // unchanged since before t
		case found == atState:
			return st, nil, nil
		case found == atUnselected:
			return nil, nil, nil
		}
	}
	// None was there at t. The stored object, if any, was, when it has
	// no revision (history began after its last change): its uid is not
	// under the name (n/ is written with a uid's first revision), and an
	// entry in the uid index exists exactly while the object at its key
	// has that uid.
	for _, uid := range uids {
		u, ok, err := uidEntry(txn, cluster, gvr, uid)
		if err != nil || ok && bytes.Equal(u.obj, key) {
			return nil, nil, err
		}
	}
	return storedRecord(txn, key)
}

// storedRecord is the stored object at key and its Table cells (copies),
// nil when there is none.
func storedRecord(txn *bdg.Txn, key []byte) (obj, cells []byte, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	err = item.Value(func(v []byte) error {
		r, err := decodeRecord(v, false)
		obj, cells = bytes.Clone(r.json), bytes.Clone(r.cells)
		return err
	})
	return obj, cells, err
}

// uidEntry is the uid's entry in the uid index; ok is false when it has
// none (no stored object has the uid).
func uidEntry(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string) (u uidState, ok bool, err error) {
	item, err := txn.Get(uidKey(cluster, gvr, uid))
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return uidState{}, false, nil
	}
	if err != nil {
		return uidState{}, false, err
	}
	err = item.Value(func(v []byte) (err error) {
		u, err = decodeUIDEntry(v, gvr, cluster)
		return err
	})
	return u, err == nil, err
}

// getAsOf is Get at o.AsOf.
func (r *Reader) getAsOf(ctx context.Context, o query.GetOptions) (query.Object, error) {
	if err := r.inWindow(ctx, o.AsOf); err != nil {
		return query.Object{}, err
	}
	clusters, err := r.clustersFor(ctx, o)
	if err != nil {
		return query.Object{}, err
	}
	out := query.Object{GVR: o.GVR, Checked: true}
	var found []string
	err = r.db.View(func(txn *bdg.Txn) error {
		h := newHistIters(txn)
		defer h.close()
		for _, c := range clusters {
			st, cells, err := objectAt(txn, h, c, o.GVR, o.Namespace, o.Name, o.AsOf.UnixNano(), nil)
			if err != nil {
				return err
			}
			if st != nil {
				found = append(found, c)
				if len(found) == 1 {
					out.Cluster, out.JSON, out.Cells = c, st, cells
				}
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return query.Object{}, err
	case len(found) == 0:
		return query.Object{}, o.NotFound()
	case len(found) > 1:
		return query.Object{}, o.Conflict(found)
	}
	return out, nil
}

// clustersFor is where a Get may look: its cluster, or every visible
// cluster the store holds a checkpoint of.
func (r *Reader) clustersFor(ctx context.Context, o query.GetOptions) ([]string, error) {
	cs, all := o.Clusters()
	if !all {
		return cs, nil
	}
	v, err := r.Versions(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range v.Clusters() {
		if o.Sees(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Revisions is one page of an object's revisions, oldest first, each with
// its object and its patch (for a revision stored as a snapshot after
// another kept one, the patch is computed). The cursor is the number of
// revisions already returned.
func (r *Reader) Revisions(ctx context.Context, o query.RevisionsOptions) (query.RevisionPage, error) {
	var page query.RevisionPage
	skip := 0
	if o.Continue != "" {
		n, err := strconv.Atoi(o.Continue)
		if err != nil || n < 0 {
			return page, fmt.Errorf("%w: revisions cursor", query.ErrInvalid)
		}
		skip = n
	}
	g := o.Object
	clusters, err := r.clustersFor(ctx, g)
	if err != nil {
		return page, err
	}
	var all []query.Revision
	err = r.db.View(func(txn *bdg.Txn) error {
		for _, c := range clusters {
			for _, uid := range uidsOf(txn, c, g.GVR, g.Namespace, g.Name) {
				if o.UID != "" && uid != o.UID {
					continue
				}
				var prev []byte
				err := eachRevision(txn, c, g.GVR, uid, func(seq uint64, rv revision, state []byte) (bool, error) {
					defer func() { prev = state }()
					t := time.Unix(0, rv.time)
					if (!o.Since.IsZero() && t.Before(o.Since)) || (!o.Until.IsZero() && !t.Before(o.Until)) {
						return true, nil
					}
					rev, err := toRevision(c, g.GVR, uid, seq, rv, state, &[2]string{g.Namespace, g.Name})
					if err != nil {
						return false, err
					}
					if rev.Patch == nil && prev != nil && rv.typ != query.ChangeDeleted {
						// Stored whole (a snapshot's turn, or a change no
						// exact patch expresses): the patch is made now, by
						// the library when the store's own cannot.
						if rev.Patch, err = rawMergePatch(prev, state); err != nil {
							if rev.Patch, err = jsonpatch.CreateMergePatch(prev, state); err != nil {
								return false, err
							}
						}
					}
					all = append(all, rev)
					return true, nil
				})
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return page, err
	}
	slices.SortStableFunc(all, func(a, b query.Revision) int { return a.Time.Compare(b.Time) })
	if skip > len(all) {
		skip = len(all)
	}
	all = all[skip:]
	if o.Limit > 0 && int64(len(all)) > o.Limit {
		all = all[:o.Limit]
		page.Continue = strconv.Itoa(skip + len(all))
	}
	page.Revisions = all
	return page, nil
}
