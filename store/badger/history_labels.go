package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// A change's labels (the feed's label selector matches them; ~60 bytes
// for a Pod, a fifth of a change's history) are kept once per label set,
// cluster and epoch of the change time in a J/ entry, and its t/ value
// holds the 8-byte hash of their encoding:
//
//	J/<epoch 8 BE>/<cluster>/<hash 8 BE> -> the labels (appendLabels)
//
// An object's label set rarely changes, and replicas share theirs, so an
// entry serves many changes. Retention removes an epoch's entries once
// it removed every change of the epoch (retainLabels): entries need no
// count of their users. A change whose epoch retention may be about to
// remove (it ends within labelEpoch of the expiry the batch read) keeps
// its labels inline. That alone does not hold against a batch made while
// retention runs (the store detects no conflicts: the batch does not see
// retention's commits, nor retention the batch's changes): a batch pins
// the epochs it names until it is done, and retention spares the pinned
// ones and, from then on, refuses pins below the epochs it removes
// (labelPins).

const (
	// labelEpoch is how long a J/ entry serves: a label set in use is
	// written once per epoch and cluster.
	labelEpoch = int64(time.Hour)
	// labelRefLen is the length of a J/ reference (an FNV-1a hash).
	labelRefLen = 8
	// The t/ value's label field: the labels inline or a J/ reference.
	labelsInline   = 0
	labelsInterned = 1
	// minInterned: shorter label encodings are kept inline (the
	// reference would not be smaller).
	minInterned = 2 * labelRefLen
)

func labelEpochOf(t int64) int64 {
	if t < 0 {
		return (t+1)/labelEpoch - 1
	}
	return t / labelEpoch
}

func internKey(epoch int64, cluster string, ref []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'J', sep}, uint64(epoch))
	b = append(append(append(b, sep), cluster...), sep)
	return append(b, ref...)
}

// internLabels is the reference to labels interned for a change at time
// t, written now if this batch, the one in flight and the store lack it;
// nil when the labels stay inline. knownEpoch (plus 1) is the epoch in
// which the object's uid entry says these labels are interned: in t's
// epoch, the entry is not read.
func (w *writer) internLabels(t int64, labels map[string]string, knownEpoch int64) ([]byte, error) {
	if len(labels) == 0 {
		return nil, nil
	}
	enc := appendLabels(nil, labels)
	epoch := labelEpochOf(t)
	if len(enc) < minInterned || (epoch+1)*labelEpoch <= w.hist.expired+labelEpoch || !w.pinLabels(epoch) {
		return nil, nil
	}
	h := fnv.New64a()
	_, _ = h.Write(enc)
	ref := h.Sum(nil)
	k := internKey(epoch, w.cluster, ref)
	id := internRef{epoch: epoch, hash: binary.BigEndian.Uint64(ref)}
	if knownEpoch == epoch+1 || w.hist.interned[id] || (w.prev != nil && w.prev.hist != nil && w.prev.hist.interned[id]) {
		return ref, nil
	}
	present, verified, complete, tried := w.s.interned.lookup(w.cluster, id)
	if verified {
		return ref, nil
	}
	if !tried {
		if err := w.loadInterned(epoch); err != nil {
			return nil, err
		}
		present, _, complete, _ = w.s.interned.lookup(w.cluster, id)
	}
	var item *bdg.Item
	var err error
	if complete && !present {
		// The process knows every entry of the hour: absent, no read.
		err = bdg.ErrKeyNotFound
	} else {
		item, err = w.txn.Get(k)
	}
	switch {
	case errors.Is(err, bdg.ErrKeyNotFound):
		if err := w.setHist(k, enc); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		same := false
		if err := item.Value(func(v []byte) error {
			same = bytes.Equal(v, enc)
			return nil
		}); err != nil {
			return nil, err
		}
		if !same {
			return nil, nil // another label set with that hash: inline
		}
	}
	if w.hist.interned == nil {
		w.hist.interned = map[internRef]bool{}
	}
	w.hist.interned[id] = true
	return ref, nil
}

// internRef names a J/ entry of a cluster.
type internRef struct {
	epoch int64
	hash  uint64
}

// internCacheMax bounds the J/ entries a store remembers (about 64
// bytes each); past it the memory starts over.
const internCacheMax = 1 << 19

// internCache is what a store knows of the J/ entries, so a change reads
// no J/ key for its labels (a Get per change was 4% of an add's CPU, and
// most adds' sets are absent: docs/benchmarks/history.md): per cluster,
// the entries present, verified when a batch of this process committed a
// reference to it after writing or comparing it (a hash names the set),
// and the hours whose entries it holds all of (loaded once by a key-only
// scan, then kept by the batches' commits), in which an entry it does
// not hold is absent. Filled after a batch's commit succeeded
// (committed), so it never holds an entry a failed batch did not write;
// retention removes only hours a writer no longer references
// (internLabels), so it does not have to be told.
type internCache struct {
	mu       sync.Mutex
	clusters map[string]*clusterInterned
	n        int
	pins     labelPins
}

type clusterInterned struct {
	ids      map[internRef]bool // present; true: verified
	complete map[int64]bool     // hours loaded; true: ids holds all their entries
}

func newInternCache() *internCache {
	return &internCache{clusters: map[string]*clusterInterned{}}
}

func (c *internCache) cluster(name string) *clusterInterned {
	ci := c.clusters[name]
	if ci == nil {
		ci = &clusterInterned{ids: map[internRef]bool{}, complete: map[int64]bool{}}
		c.clusters[name] = ci
	}
	return ci
}

// lookup says whether the entry is present (verified), whether the cache
// holds all of its hour's entries (complete), and whether it tried to
// load them (tried: a load over the bound is not tried again).
func (c *internCache) lookup(cluster string, id internRef) (present, verified, complete, tried bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := c.clusters[cluster]
	if ci == nil {
		return false, false, false, false
	}
	verified, present = ci.ids[id]
	complete, tried = ci.complete[id.epoch]
	return present, verified, complete, tried
}

// room makes room for more entries: past internCacheMax, everything goes
// (and with it every hour's completeness).
func (c *internCache) room(more int) {
	if c.n+more > internCacheMax {
		clear(c.clusters)
		c.n = 0
	}
}

func (c *internCache) add(cluster string, ids map[internRef]bool) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room(len(ids))
	ci := c.cluster(cluster)
	for id := range ids {
		if _, ok := ci.ids[id]; !ok {
			c.n++
		}
		ci.ids[id] = true
	}
}

// load records the entries of an hour a scan found (all of them, as of
// the scan's snapshot: the batch in flight, not in it, adds its own when
// it commits), and forgets the hours before the one before it.
func (c *internCache) load(cluster string, epoch int64, hashes []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := c.cluster(cluster)
	for id := range ci.ids {
		if id.epoch < epoch-1 {
			delete(ci.ids, id)
			c.n--
		}
	}
	for e := range ci.complete {
		if e < epoch-1 {
			delete(ci.complete, e)
		}
	}
	if c.n+len(hashes) > internCacheMax {
		ci.complete[epoch] = false // not complete: the entries are read one by one
		return
	}
	for _, h := range hashes {
		id := internRef{epoch: epoch, hash: h}
		if _, ok := ci.ids[id]; !ok {
			ci.ids[id] = false
			c.n++
		}
	}
	ci.complete[epoch] = true
}

// loadInterned reads the keys of the cluster's J/ entries of an hour
// into the store's cache.
func (w *writer) loadInterned(epoch int64) error {
	prefix := internKey(epoch, w.cluster, nil)
	it := w.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var hashes []uint64
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+labelRefLen {
			return errCorrupt
		}
		hashes = append(hashes, binary.BigEndian.Uint64(k[len(prefix):]))
	}
	w.s.interned.load(w.cluster, epoch, hashes)
	return nil
}

// committed notes, once the writer's batch is durable, the J/ entries it
// wrote or found, and releases the epochs it pinned (its changes name
// them in the store now).
func (w *writer) committed() {
	if w.hist != nil {
		w.s.interned.add(w.cluster, w.hist.interned)
	}
	w.unpinLabels()
}

// labelPins keeps retention from removing the J/ entries of an epoch a
// batch not yet committed names (it read, wrote or assumed them before
// retention looked for the epochs no change names: labelsUnused reads
// committed changes only). A batch pins an epoch before it names one;
// retention, between watch and settle, sees the epochs pinned, and those
// released in between (a batch that committed after labelsUnused's
// snapshot), and removes none of them; from settle on a pin below what it
// removes is refused (the change keeps its labels inline).
type labelPins struct {
	// pass serializes retention passes (Retain): their counters are read
	// and written without conflict detection, and one watch at a time.
	pass     sync.Mutex
	mu       sync.Mutex
	floor    int64         // pins below it are refused
	pinned   map[int64]int // epoch: batches that pinned it
	watching bool
	released int64 // the lowest epoch released while watching
}

func (p *labelPins) pin(epoch int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch < p.floor {
		return false
	}
	if p.pinned == nil {
		p.pinned = map[int64]int{}
	}
	p.pinned[epoch]++
	return true
}

func (p *labelPins) unpin(epochs map[int64]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for e := range epochs {
		if n, ok := p.pinned[e]; n > 1 {
			p.pinned[e] = n - 1
		} else if ok {
			delete(p.pinned, e)
		}
		if p.watching {
			p.released = min(p.released, e)
		}
	}
}

// watch begins a retention pass's look at the pins, before it reads which
// epochs the committed changes name.
func (p *labelPins) watch() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watching, p.released = true, math.MaxInt64
}

// settle ends the look: retention may remove the epochs before the one it
// returns, given that no committed change names one before before.
func (p *labelPins) settle(before int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.floor = max(p.floor, before)
	for e := range p.pinned {
		before = min(before, e)
	}
	p.watching = false
	return min(before, p.released)
}

// pinLabels pins epoch for the writer's batch (once per batch and
// epoch); false: retention is removing it, the labels stay inline.
func (w *writer) pinLabels(epoch int64) bool {
	if w.hist.pins[epoch] {
		return true
	}
	if !w.s.interned.pins.pin(epoch) {
		return false
	}
	if w.hist.pins == nil {
		w.hist.pins = map[int64]bool{}
	}
	w.hist.pins[epoch] = true
	return true
}

// unpinLabels releases the batch's pins: it committed, or it is dropped.
func (w *writer) unpinLabels() {
	if w.hist == nil || len(w.hist.pins) == 0 {
		return
	}
	w.s.interned.pins.unpin(w.hist.pins)
	w.hist.pins = nil
}

// resolveLabels reads the labels c's t/ entry (at time t, of cluster)
// references, through cache (by J/ key) when not nil.
func resolveLabels(txn *bdg.Txn, c *changeEntry, t int64, cluster string, cache map[string]map[string]string) error {
	if c.labelRef == nil {
		return nil
	}
	k := internKey(labelEpochOf(t), cluster, c.labelRef)
	if l, ok := cache[string(k)]; ok {
		c.labels = l
		return nil
	}
	item, err := txn.Get(k)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return fmt.Errorf("labels of the change at %d in %s: %w", t, cluster, errCorrupt)
	}
	if err != nil {
		return err
	}
	err = item.Value(func(v []byte) (err error) {
		c.labels, _, err = cutLabels(v, true)
		return err
	})
	if err == nil && cache != nil {
		cache[string(k)] = c.labels
	}
	return err
}

// retainLabels removes, in transactions of at most retainBatch deletes,
// the J/ entries of the epochs before before (no change of them is left)
// and takes their bytes off the clusters' retention counters.
func (s *Store) retainLabels(before int64) error {
	for {
		more, err := s.retainSomeLabels(before)
		if err != nil || !more {
			return err
		}
	}
}

func (s *Store) retainSomeLabels(before int64) (bool, error) {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	freed := map[string]int64{}
	var keys [][]byte
	prefix := []byte{'J', sep}
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	for it.Rewind(); it.Valid() && len(keys) < retainBatch*8; it.Next() {
		k := it.Item().Key()
		if len(k) < 2+8+1+1+labelRefLen {
			it.Close()
			return false, errCorrupt
		}
		if int64(binary.BigEndian.Uint64(k[2:10])) >= before {
			break
		}
		freed[string(k[11:len(k)-1-labelRefLen])] += int64(len(k)) + it.Item().ValueSize()
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	if len(keys) == 0 {
		return false, nil
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return false, err
		}
	}
	for c, n := range freed {
		prev, err := readInt(txn, removedKey(c))
		if err != nil {
			return false, err
		}
		if err := txn.Set(removedKey(c), binary.BigEndian.AppendUint64(nil, uint64(prev+n))); err != nil {
			return false, err
		}
	}
	return len(keys) == retainBatch*8, txn.Commit()
}

// labelsUnused is the first epoch whose J/ entries a change may still
// reference: the epoch of the oldest change left, or, when none is left,
// of the latest one retention removed (its epoch may get more changes).
func (s *Store) labelsUnused() (int64, error) {
	var before int64
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'t', sep}})
		defer it.Close()
		it.Rewind()
		if it.Valid() {
			t, _, _, err := splitTimeKey(it.Item().Key())
			before = labelEpochOf(t)
			return err
		}
		expired, err := readInt(txn, expiredKey)
		before = labelEpochOf(expired)
		return err
	})
	return before, err
}
