package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
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
// its labels inline, so an entry is not referenced after its removal
// unless retention advanced more than an epoch while one batch was
// being made.

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
	if len(enc) < minInterned || (epoch+1)*labelEpoch <= w.hist.expired+labelEpoch {
		return nil, nil
	}
	h := fnv.New64a()
	_, _ = h.Write(enc)
	ref := h.Sum(nil)
	k := internKey(epoch, w.cluster, ref)
	id := internRef{epoch: epoch, hash: binary.BigEndian.Uint64(ref)}
	if knownEpoch == epoch+1 || w.hist.interned[id] || (w.prev != nil && w.prev.hist != nil && w.prev.hist.interned[id]) || w.s.interned.has(w.cluster, id) {
		return ref, nil
	}
	item, err := w.txn.Get(k)
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

// internCacheMax bounds the J/ entries a store remembers as committed
// (about 64 bytes each); past it the memory starts over.
const internCacheMax = 1 << 17

// internCache is the J/ entries known committed, so a change whose label
// set its object had before reads no J/ key (a Get per change was 4% of
// an add's CPU: docs/benchmarks/history.md). Filled after a batch's
// commit succeeded (committed), so it never vouches for an entry a
// failed batch did not write; retention removes only epochs a writer no
// longer references (internLabels), so it does not have to be told.
type internCache struct {
	mu sync.Mutex
	m  map[string]map[internRef]struct{} // by cluster
	n  int
}

func newInternCache() *internCache {
	return &internCache{m: map[string]map[internRef]struct{}{}}
}

func (c *internCache) has(cluster string, id internRef) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[cluster][id]
	return ok
}

func (c *internCache) add(cluster string, ids map[internRef]bool) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n+len(ids) > internCacheMax {
		clear(c.m)
		c.n = 0
	}
	m := c.m[cluster]
	if m == nil {
		m = map[internRef]struct{}{}
		c.m[cluster] = m
	}
	for id := range ids {
		if _, ok := m[id]; !ok {
			m[id] = struct{}{}
			c.n++
		}
	}
}

// committed notes, once the writer's batch is durable, the J/ entries it
// wrote or found.
func (w *writer) committed() {
	if w.hist != nil {
		w.s.interned.add(w.cluster, w.hist.interned)
	}
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
