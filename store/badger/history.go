package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
)

// HistoryOptions configure the history (issue #48; layout and model in
// doc.go and docs/history.md). History is on when both bounds are set.
type HistoryOptions struct {
	// Retention is how long a change is kept (by the collector's
	// observation time).
	Retention time.Duration
	// MaxBytes bounds the history's bytes (keys and values, all clusters);
	// past it the oldest changes go first.
	MaxBytes int64
	// SnapshotEvery bounds an object's chain of reverse patches: a
	// revision keeps the previous state whole once the patches since the
	// last whole state reach twice the object's bytes, and at least every
	// SnapshotEvery revisions, so any revision reads with at most
	// SnapshotEvery-1 patch applications (chainCost). Default 128, at
	// most 255 (the uid entry's chain byte).
	SnapshotEvery int
	// RetainInterval is how often the retention loop runs. Default 1 min;
	// negative: no loop, the caller calls Retain (tests, whose clock is
	// not the wall clock: a loop would expire their changes by time.Now).
	RetainInterval time.Duration
}

func (o HistoryOptions) enabled() bool { return o.Retention > 0 && o.MaxBytes > 0 }

const (
	revSnapshot = 1 // the body is the object's JSON
	revPatch    = 2 // the body is a JSON merge patch against the previous revision
)

// histWriter is a writer's part of the history: the byte counter of its
// cluster and the expiry it saw.
type histWriter struct {
	on      bool
	every   int
	expired int64 // expiredKey as the batch began
	bytes   int64 // the cluster's h/ counter, valid when loaded
	loaded  bool
	// written are the revisions this batch wrote without a state of their
	// own, by key: keepState may have to rewrite one while its batch is
	// in flight (not in the next batch's snapshot).
	written map[string][]byte
	// interned are the J/ entries this batch wrote or found
	// (internLabels): the next batch's snapshot lacks this one's.
	interned map[internRef]bool
	// pins are the epochs whose J/ entries the batch names (labelPins).
	pins map[int64]bool
	// legacy writes what an older binary wrote (format 3 revisions under
	// text uids, format 1 changes): the tests' stores of one
	// (Store.histLegacy).
	legacy bool
}

// loadHistory reads the counter and the expiry once per writer: from the
// batch in flight when there is one (its transaction is not in this one's
// snapshot), else from the store.
func (w *writer) loadHistory() error {
	h := w.hist
	if !h.on || h.loaded {
		return nil
	}
	if w.prev != nil && w.prev.hist != nil && w.prev.hist.loaded {
		h.bytes, h.expired, h.loaded = w.prev.hist.bytes, w.prev.hist.expired, true
		return w.markBegun()
	}
	var err error
	if h.bytes, err = readInt(w.txn, addedKey(w.cluster)); err != nil {
		return err
	}
	if h.expired, err = readInt(w.txn, expiredKey); err != nil {
		return err
	}
	h.loaded = true
	return w.markBegun()
}

func readInt(txn *bdg.Txn, k []byte) (int64, error) {
	it, err := txn.Get(k)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n int64
	err = it.Value(func(v []byte) error {
		if len(v) != 8 {
			return errCorrupt
		}
		n = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	return n, err
}

func (w *writer) setHist(k, v []byte) error {
	w.hist.bytes += int64(len(k) + len(v))
	return w.set(k, v)
}

// saveHistory writes the cluster's counter with the checkpoint, in the
// room kept for both (ckptRoomEntries): through room, a batch committed
// in prefixes (Store.Apply) was refused the counter once the prefix had
// filled the transaction, and failed with ErrTxnTooBig.
func (w *writer) saveHistory() error {
	if !w.hist.loaded {
		return nil
	}
	return w.count(w.txn.Set(addedKey(w.cluster), binary.BigEndian.AppendUint64(nil, uint64(w.hist.bytes))))
}

// eventTime is when the collector observed the event; an event without a
// time (built elsewhere) gets the hub's.
func eventTime(e *feed.Event) int64 {
	if t := e.Event.GetObservedUnixNano(); t > 0 {
		return t
	}
	return time.Now().UnixNano()
}

// recordUpsert records the revision an upsert makes, given the object it
// replaces (old, the stored JSON, nil when there is none or it had
// another uid) and the uid's head. It returns the head to keep in the uid
// index. An update that leaves the resourceVersion as it was records
// nothing. The new revision stores no state (the object's record is its
// state); it carries the patch back to old, or old whole. sameLabels: the
// object's labels are those of its newest revision.
func (w *writer) recordUpsert(gvr schema.GroupVersionResource, e *feed.Event, lbls map[string]string, old []byte, head histHead, sameLabels bool) (histHead, error) {
	ev := e.Event
	if head.seq != 0 && head.rv == ev.GetResourceVersion() && old != nil {
		return head, nil
	}
	if err := w.loadHistory(); err != nil {
		return head, err
	}
	typ := query.ChangeModified
	if old == nil {
		typ = query.ChangeAdded
	}
	obj := ev.GetObject()
	r := revision{typ: typ, time: eventTime(e), rv: ev.GetResourceVersion(),
		manager: ev.GetManager(), op: ev.GetOperation(), sub: ev.GetSubresource()}
	next := histHead{seq: e.Seq, time: r.time, rv: r.rv}
	keepPrev := old != nil
	if head.seq != 0 && old != nil && head.time <= w.hist.expired {
		// The previous revision is past the window, kept only as the
		// newest: it goes, and this one is the first kept.
		if err := w.dropRevision(gvr, ev.GetUid(), head.seq); err != nil {
			return head, err
		}
		keepPrev = false
	}
	// The pre-stage's patches hold when made against this very old: the
	// snapshot's JSON, not what an earlier event of the batch wrote.
	pre := w.pre[e]
	patched := pre != nil && pre.patched && sameSlice(pre.old, old)
	var packed []byte // old s2-compressed, when the revision keeps it whole
	if keepPrev {
		var rev, fwd []byte
		if patched {
			fwd, rev = pre.fwd, pre.rev
		} else {
			fwd, rev = mergePatches(old, obj)
		}
		if w.hist.legacy {
			// The older binary kept a patch only with its forward one.
			if r.fwd = fwd; fwd == nil {
				rev = nil
			}
		}
		if cost := chainCost(len(rev), len(old), w.hist.every); rev != nil && int(head.chain)+cost < w.hist.every {
			r.prev, next.chain = rev, head.chain+uint8(cost)
		} else {
			r.prev, r.prevWhole = old, true
			if patched {
				packed = pre.whole
			}
		}
	}
	if head.seq == 0 {
		nk := []byte(nil)
		if pre != nil {
			nk = pre.name
		}
		if nk == nil {
			nk = nameKey(w.cluster, gvr, ev.GetNamespace(), ev.GetName(), ev.GetUid())
		}
		if err := w.setHist(nk, nil); err != nil {
			return head, err
		}
		if old != nil && e.Seq > 1 {
			// The object predates the history: its state before this
			// change is kept as a baseline (time 0, no feed entry; its
			// state is this revision's prev), so an as-of read before the
			// change finds it.
			base := revision{typ: query.ChangeModified}
			if err := w.setHist(w.revKey(gvr, ev.GetUid(), e.Seq-1), w.encodeRevision(base)); err != nil {
				return head, err
			}
		}
	}
	known := int64(0)
	if sameLabels {
		known = head.labelEpoch
	}
	c := changeEntry{typ: typ, gvr: gvr, uid: ev.GetUid(), ns: ev.GetNamespace(),
		name: ev.GetName(), rv: r.rv, manager: r.manager, op: r.op, sub: r.sub, labels: lbls}
	var ck changeKeys
	if pre != nil && pre.keyed && pre.time == r.time {
		ck = pre.keys
	} else {
		ck = w.changeKeysOf(gvr, e.Seq, r.time, c)
	}
	var err error
	next.labelEpoch, err = w.writeRevision(r, c, ck, packed, known)
	return next, err
}

// chainBudget is how many times an object's bytes its reverse patches
// since the last whole state may add up to: a revision read then
// processes at most about that many object sizes of patches besides the
// state, and a one-label change of a 3.2 KB Pod keeps a whole state
// (about 1.9 KB compressed, in the value log) once in every
// SnapshotEvery changes, not every 16th (docs/history.md).
const chainBudget = 2

// defaultSnapshotEvery and maxSnapshotEvery bound HistoryOptions.SnapshotEvery:
// 128 keeps a one-label change's share of the whole states at about 15
// bytes on disk, a rebuild at most 127 patch applications (about 5 µs
// each for a 3.2 KB Pod); the chain is one byte of the uid entry.
const (
	defaultSnapshotEvery = 128
	maxSnapshotEvery     = 255
)

// chainCost is what a reverse patch of n bytes against a previous state
// of size bytes adds to the object's chain (histHead.chain, one byte
// in the uid entry): its share of chainBudget object sizes, in
// every-ths, rounded, at least 1, so the chain keeps a patch while it
// stays under every: at most every-1 patches, and their bytes at most
// about chainBudget times the object's (three times, rounded up patch
// by patch). An older binary's chain counted patches, one each: it
// reads the same.
func chainCost(n, size, every int) int {
	if size <= 0 {
		return every
	}
	return max(1, (2*n*every+chainBudget*size)/(2*chainBudget*size))
}

// mergePatch is the JSON merge patch from old to cur when it is much
// smaller than cur and applying it to old gives cur's exact bytes.
func mergePatch(old, cur []byte) ([]byte, bool) {
	p, _ := mergePatches(old, cur)
	return p, p != nil
}

// recordDelete records a delete: its revision holds the object's last
// state (own), and the previous revision's state is the same ("{}").
func (w *writer) recordDelete(gvr schema.GroupVersionResource, e *feed.Event, ns, name string, last []byte, labels map[string]string, head histHead) error {
	if err := w.loadHistory(); err != nil {
		return err
	}
	ev := e.Event
	r := revision{typ: query.ChangeDeleted, time: eventTime(e), rv: ev.GetResourceVersion(), own: last}
	if head.seq != 0 {
		r.prev = []byte("{}")
	}
	if head.seq == 0 {
		if err := w.setHist(nameKey(w.cluster, gvr, ns, name, ev.GetUid()), nil); err != nil {
			return err
		}
	}
	c := changeEntry{typ: query.ChangeDeleted, gvr: gvr, uid: ev.GetUid(), ns: ns, name: name, rv: r.rv, labels: labels}
	_, err := w.writeRevision(r, c, w.changeKeysOf(gvr, e.Seq, r.time, c), nil, 0)
	return err
}

// keepState stores the state of the uid's newest revision in it (own)
// when the object's record, which was that state, leaves the store
// without a delete being recorded: its name taken by a new uid, its
// resource removed.
func (w *writer) keepState(gvr schema.GroupVersionResource, uid string, head histHead, state []byte) error {
	if head.seq == 0 || state == nil {
		return nil
	}
	if err := w.loadHistory(); err != nil {
		return err
	}
	k, v, err := w.findRevision(gvr, uid, head.seq)
	if err != nil || v == nil {
		return err
	}
	r, err := decodeRevision(v)
	if errors.Is(err, errOldRevision) {
		return nil // it holds its state (forward patches): retention removes it with the window
	}
	if err != nil || r.own != nil {
		return err
	}
	r.own = state
	w.hist.bytes -= int64(len(k) + len(v))
	return w.setHist(k, w.encodeRevision(r))
}

// findRevision is the uid's revision seq, its key and value, as this
// batch, the batch in flight or the store holds it, under either form of
// the uid; nil when there is none.
func (w *writer) findRevision(gvr schema.GroupVersionResource, uid string, seq uint64) (k, v []byte, err error) {
	keys := [][]byte{revKey(w.cluster, gvr, uid, seq)}
	if packUID(uid) != nil {
		keys = append(keys, textRevKey(w.cluster, gvr, uid, seq))
	}
	for _, k := range keys {
		v := w.hist.written[string(k)]
		if v == nil && w.prev != nil && w.prev.hist != nil {
			v = w.prev.hist.written[string(k)]
		}
		if v != nil {
			return k, v, nil
		}
		it, err := w.txn.Get(k)
		if errors.Is(err, bdg.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		v, err = it.ValueCopy(nil)
		return k, v, err
	}
	return nil, nil, nil
}

// revKey and encodeRevision are the writer's: an older binary's forms
// when legacy.
func (w *writer) revKey(gvr schema.GroupVersionResource, uid string, seq uint64) []byte {
	if w.hist.legacy {
		return textRevKey(w.cluster, gvr, uid, seq)
	}
	return revKey(w.cluster, gvr, uid, seq)
}

func (w *writer) encodeRevision(r revision) []byte {
	if w.hist.legacy {
		return encodeRevisionV3(r)
	}
	return encodeRevision(r)
}

// writeRevision writes the revision and the change's feed entries under
// ck (changeKeysOf), given r's previous state compressed (packed, nil: not
// made), and the epoch (plus 1) in which the labels are known interned
// (knownEpoch, 0: not known); it returns the epoch (plus 1) in which they
// are, 0 when they are inline.
func (w *writer) writeRevision(r revision, c changeEntry, ck changeKeys, packed []byte, knownEpoch int64) (int64, error) {
	k, v := ck.rev, w.encodePacked(r, packed)
	if err := w.setHist(k, v); err != nil {
		return 0, err
	}
	if r.own == nil {
		if w.hist.written == nil {
			w.hist.written = map[string][]byte{}
		}
		w.hist.written[string(k)] = v
	}
	// The f/ value is the time (with it, a replay finds the change's t/
	// entry, which names the uid); an older binary's led with the uid.
	fv := binary.BigEndian.AppendUint64(nil, uint64(r.time))
	labelEpoch := int64(0)
	if !w.hist.legacy {
		ref, err := w.internLabels(r.time, c.labels, knownEpoch)
		if err != nil {
			return 0, err
		}
		if c.labelRef = ref; ref != nil {
			labelEpoch = labelEpochOf(r.time) + 1
		}
	}
	var cv, xv []byte
	if ck.body != nil {
		cv = appendChange(c, ck.body)
	} else {
		cv = encodeChange(c)
	}
	if w.hist.legacy {
		fv = binary.BigEndian.AppendUint64([]byte(c.uid), uint64(r.time))
		cv = encodeChangeV1(c)
		xv = cv
	}
	if err := w.setHist(ck.feed, fv); err != nil {
		return 0, err
	}
	if err := w.setHist(ck.t, cv); err != nil {
		return 0, err
	}
	if err := w.setHist(ck.changed, nil); err != nil {
		return 0, err
	}
	if c.typ == query.ChangeDeleted {
		// Key only: the t/ entry at the same time, cluster and seq holds it.
		return labelEpoch, w.setHist(timeKey('x', r.time, w.cluster, ck.seq), xv)
	}
	return labelEpoch, nil
}

// dropRevision deletes a revision the materializer no longer needs (an
// expired base) and takes its bytes off the cluster's counter.
func (w *writer) dropRevision(gvr schema.GroupVersionResource, uid string, seq uint64) error {
	k, v, err := w.findRevision(gvr, uid, seq)
	if err != nil || k == nil {
		return err
	}
	w.hist.bytes -= int64(len(k) + len(v))
	return w.del(k)
}

// histBase is what an upsert patches against, given the uid's entry u
// (ok when it exists): the object's current JSON at key, nil when it has
// none or the uid leads elsewhere.
func (w *writer) histBase(key []byte, u uidState, ok bool) ([]byte, error) {
	if !ok || !bytes.Equal(u.obj, key) {
		return nil, nil
	}
	return w.currentJSON(key)
}

// histDelete records the delete of the object u names; for a resource
// removed from the cache (e nil), not deleted in its member, the newest
// revision keeps the state the record held.
func (w *writer) histDelete(gvr schema.GroupVersionResource, e *feed.Event, uid string, u uidState) error {
	last, err := w.currentJSON(u.obj)
	if err != nil || last == nil {
		return err
	}
	if e == nil {
		return w.keepState(gvr, uid, u.head, last)
	}
	st, _, err := w.object(u.obj, false)
	if err != nil {
		return err
	}
	ns, name, _, err := tail(u.obj)
	if err != nil {
		return err
	}
	return w.recordDelete(gvr, e, ns, name, last, st.labels, u.head)
}

// keepOldState keeps the state of the object at key, of uid oldUID (its
// uid entry at oldU), in its newest revision: a new uid takes its name.
func (w *writer) keepOldState(gvr schema.GroupVersionResource, key, oldU []byte, oldUID string) error {
	u, ok, err := w.uidEntry(gvr, oldU)
	if err != nil || !ok || u.head.seq == 0 {
		return err
	}
	last, err := w.currentJSON(key)
	if err != nil {
		return err
	}
	return w.keepState(gvr, oldUID, u.head, last)
}

// currentJSON is the object at key as this batch, the batch in flight or
// the store holds it; nil when there is none. Reading the store's record
// costs a value-log read per update (measured: docs/benchmarks/history.md),
// made ahead for the batch by prefetchPrevious.
func (w *writer) currentJSON(key []byte) ([]byte, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.objs[string(key)]; ok {
			if st.gone {
				return nil, nil
			}
			if st.json != nil {
				return st.json, nil
			}
		}
	}
	if j, ok := w.fetched[string(key)]; ok {
		return j, nil
	}
	return storedJSON(w.txn, key)
}
