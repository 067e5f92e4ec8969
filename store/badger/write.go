package badger

import (
	"context"
	"encoding/binary"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// overlay is what one batch did to the keys a later write reads: objects
// (their labels and uid) and the uid index. Label keys are only ever
// written, so they need no entry.
type overlay struct {
	objs map[string]objState
	uids map[string]uidState
	// rels: the relations' E/ entries (relate.go), made on first use.
	rels map[string]relState
	// vals: the value index's X/ entries (valueindex.go), made on first use.
	vals map[string][]vpair
	// counts: the counters this batch wrote (counters.go), made on first use.
	counts map[string]int64
	// hist is the batch's history counter and expiry (history.go), read
	// by the batch after it: that batch's snapshot lacks this one.
	hist *histWriter
}

type objState struct {
	gone   bool
	uid    string
	labels map[string]string
	// sameMeta: the uid index vouches that the stored object has the
	// labels and search text of the one being written (metaHash).
	sameMeta bool
	// json is the object as this batch wrote it (the history patches the
	// next revision against it).
	json []byte
}

type uidState struct {
	gone bool
	obj  []byte
	// metaHash of the object's labels and search text.
	metaHash uint64
	// head is the object's newest revision in the history.
	head histHead
}

func newOverlay() *overlay {
	return &overlay{objs: map[string]objState{}, uids: map[string]uidState{}}
}

// writer applies events of one cluster stream to a transaction. Its reads
// see, newest first, the transaction's own writes (ov), the batch in flight
// before it (prev), then the transaction's snapshot.
type writer struct {
	s       *Store
	cluster string
	txn     *bdg.Txn
	ov      *overlay
	prev    *overlay
	// known, when set, has every primary key of the cluster in the store.
	known *keyFilter
	// writes counts the transaction's accepted writes: a transaction too
	// big with none of them cannot be split further.
	writes int
	// slab, when set, holds the transaction's records until its commit
	// is done.
	slab *slab
	// budget is what the transaction holds, as Badger counts it (txnroom.go).
	budget txnBudget
	// fetched: the stored JSON of objects the batch's upserts replace,
	// read ahead by prefetchPrevious (nil: none stored), for the history.
	fetched map[string][]byte
	// pre: what prefetchPrevious made of each upsert's history, by event
	// (history_pre.go).
	pre map[*feed.Event]*histPre
	// cnt: the transaction's counter changes, written at its commit
	// (counters.go).
	cnt map[string]int64
	// zero: the counters cnt changes from zero, whatever is stored
	// (zeroCounters).
	zero map[string]bool
	// hist is allocated on its own, not a field of the writer: the
	// overlay points at it for the next batch, and a pointer into the
	// writer would keep the writer alive, its prev overlay with it, and
	// so every overlay (and object JSON) the store ever wrote.
	hist *histWriter
	// relDoc: the buffers relate builds its documents in (relate.go).
	relDoc relDocBuf
}

func (w *writer) set(k, v []byte) error {
	if err := w.room(k, len(v)); err != nil {
		return err
	}
	return w.count(w.txn.Set(k, v))
}

// setSearch writes a search key. Its text goes to the value log, however
// short: held in the LSM tree (most texts are under the store's value
// threshold) it made the tree bigger and both applying and replaying
// slower (bench-materializer FV_BENCH_AB; measured:
// docs/benchmarks/materializer.md#2026-12-01-evening-what-the-search-index-costs);
// a search reads it from the value log in a little under twice the time.
func (w *writer) setSearch(k, text []byte) error {
	if err := w.room(k, 1<<20); err != nil {
		return err
	}
	return w.count(w.txn.SetEntry(searchEntry(k, text)))
}

// searchEntry is a search key's entry, its text bound for the value log
// (setSearch says why).
func searchEntry(k, text []byte) *bdg.Entry {
	return bdg.NewEntry(k, text).WithValueThreshold(1)
}

func (w *writer) del(k []byte) error {
	if err := w.room(k, 0); err != nil {
		return err
	}
	return w.count(w.txn.Delete(k))
}

func (w *writer) count(err error) error {
	if err == nil {
		w.writes++
	}
	return err
}

// discard drops the transaction and its records.
func (w *writer) discard() {
	w.txn.Discard()
	w.slab.release()
	w.unpinLabels()
}

// renew starts the next transaction after a commit.
func (w *writer) renew() {
	w.txn = w.s.db.NewTransaction(true)
	w.writes, w.budget = 0, txnBudget{}
}

// newWriter starts a writer on txn, or on a new transaction.
func (s *Store) newWriter(ctx context.Context, cluster string, prev *overlay, txn *bdg.Txn) (*writer, error) {
	known, err := s.knownKeys(ctx, cluster)
	if err != nil {
		if txn != nil {
			txn.Discard()
		}
		return nil, err
	}
	if txn == nil {
		txn = s.db.NewTransaction(true)
	}
	w := &writer{s: s, cluster: cluster, txn: txn, ov: newOverlay(), prev: prev, known: known,
		hist: &histWriter{on: s.hist.enabled(), every: s.hist.SnapshotEvery, legacy: s.histLegacy}}
	w.ov.hist = w.hist
	return w, nil
}

func (w *writer) setCheckpoint(seq uint64) error {
	if err := w.flushCounts(); err != nil {
		return err
	}
	if err := w.saveHistory(); err != nil {
		return err
	}
	v := make([]byte, 8)
	binary.BigEndian.PutUint64(v, seq)
	if w.s.counters {
		return w.count(w.txn.SetEntry(stampedCheckpoint(w.cluster, v)))
	}
	return w.set(ckptKey(w.cluster), v)
}

func (w *writer) commit(seq uint64) error {
	if err := w.setCheckpoint(seq); err != nil {
		return err
	}
	if err := w.txn.Commit(); err != nil {
		return err
	}
	w.committed()
	return nil
}

// apply writes one event and records in it what it replaced (e.Prior).
func (w *writer) apply(e *feed.Event) (err error) {
	ev := e.Event
	gvr := stream.GVR(ev.GetGvr())
	switch ev.GetType() {
	case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
		e.Prior, err = w.upsert(gvr, e)
		return err
	case fleetviewv1.EventType_EVENT_TYPE_DELETE:
		e.Prior, err = w.deleteUID(gvr, ev.GetUid(), e)
		return err
	case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return w.removeResource(gvr)
	}
	return nil // sync markers carry no object state
}

func (w *writer) upsert(gvr schema.GroupVersionResource, e *feed.Event) (feed.Prior, error) {
	ev := e.Event
	seq, lbls, text := e.Seq, e.Labels, e.Search
	if !e.Labeled {
		var err error
		if lbls, text, err = materializer.LabelsAndSearchText(ev.GetObject(), w.cluster); err != nil {
			return feed.Prior{}, materializer.Poison(seq, "object of %s/%s: %v", ev.GetNamespace(), ev.GetName(), err)
		}
	}
	ns, name, uid := ev.GetNamespace(), ev.GetName(), ev.GetUid()
	key := objKey(gvr, ns, name, w.cluster)
	ukey := uidKey(w.cluster, gvr, uid)
	lh := metaHash(lbls, text)
	// The relations are read first: the uid entry's hash covers them
	// (relMetaHash), so an update that keeps them reads no E/ entry.
	ru, err := w.relReadFor(gvr, ns, name, ev.GetObject())
	if err != nil {
		return feed.Prior{}, err // checked by the materializer: not reached
	}
	uh := ru.metaHash(lh)
	var head histHead
	var oldJSON []byte
	var pre *uidLookup
	if w.hist.on {
		// The history needs the uid entry whatever the overlay says of the
		// object: it is read once, here, for previous too. An entry exists
		// only while the object at its key has its uid, so when the key is
		// known absent (an add) there is none to read.
		var u uidState
		var ok bool
		if st, known := w.unread(key); !known || !st.gone {
			var err error
			if u, ok, err = w.uidEntry(gvr, ukey); err != nil {
				return feed.Prior{}, err
			}
		}
		pre = &uidLookup{u: u, ok: ok}
		var err error
		if oldJSON, err = w.histBase(key, u, ok); err != nil {
			return feed.Prior{}, err
		}
		head = u.head
	}
	old, exists, err := w.previous(gvr, key, ukey, uid, lbls, lh, uh, pre, &ru)
	if err != nil {
		return feed.Prior{}, err
	}
	// A new uid under a name the cache holds is a new object (ADDED), which
	// took the place, and the labels, of the old one.
	reused := exists && old.uid != uid && old.uid != ""
	prior := feed.Prior{Told: true, Exists: exists && !reused, Labels: old.labels}
	if reused {
		// The name is reused by a new object: the old one's uid no longer
		// leads here (see uidEntry).
		oldU := uidKey(w.cluster, gvr, old.uid)
		if w.hist.on {
			if err := w.keepOldState(gvr, key, oldU, old.uid); err != nil {
				return prior, err
			}
		}
		if err := w.del(oldU); err != nil {
			return prior, err
		}
		w.ov.uids[string(oldU)] = uidState{gone: true}
	}
	for k, v := range old.labels {
		if nv, ok := lbls[k]; !ok || nv != v {
			if err := w.del(labelKey(gvr, k, v, ns, name, w.cluster)); err != nil {
				return prior, err
			}
		}
	}
	for k, v := range lbls {
		if ov, ok := old.labels[k]; ok && ov == v {
			continue
		}
		if err := w.set(labelKey(gvr, k, v, ns, name, w.cluster), nil); err != nil {
			return prior, err
		}
	}
	if !old.sameMeta || reused {
		if err := w.setSearch(searchKey(gvr, ns, name, w.cluster), text); err != nil {
			return prior, err
		}
	}
	if !exists {
		if err := w.set(clusterKey(gvr, ns, name, w.cluster), nil); err != nil {
			return prior, err
		}
	}
	// A row's parts are found once, here, rather than by every Table
	// that prints the object; an object without them is stored without.
	row, _ := rawjson.FindRowSpans(ev.GetObject(), stream.ClusterAnnotation)
	var added []cdelta
	if !exists {
		added = w.objectDelta(gvr, ns, 1)
	}
	if err := w.writeCounted(key, encodeRecord(record{seq: seq, labels: lbls, cells: ev.GetCells(), row: row, json: ev.GetObject()}, w.slab.alloc), false, added); err != nil {
		return prior, err
	}
	// Noted now, not once the event is done: a batch split for its size
	// commits this record with its count, and the event applied again
	// must find it, not what the overlay held before.
	w.ov.objs[string(key)] = objState{uid: uid, labels: lbls, json: ev.GetObject()}
	if w.known != nil {
		w.known.add(key)
	}
	if err := w.indexValues(gvr, key, ev.GetObject(), exists); err != nil {
		return prior, err
	}
	if err := w.relate(gvr, ns, name, ev.GetObject(), lbls, exists, &ru); err != nil {
		return prior, err
	}
	if w.hist.on {
		if head, err = w.recordUpsert(gvr, e, lbls, oldJSON, head, pre.ok && (pre.u.metaHash == lh || pre.u.metaHash == uh || old.sameMeta)); err != nil {
			return prior, err
		}
	}
	if err := w.set(ukey, encodeUIDEntry(ns, name, uh, head, w.slab.alloc)); err != nil {
		return prior, err
	}
	w.ov.uids[string(ukey)] = uidState{obj: key, metaHash: uh, head: head}
	return prior, nil
}
