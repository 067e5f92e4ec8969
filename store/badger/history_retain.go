package badger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// beginKey holds, per cluster, the stream sequence before its first
// recorded change: changes at or before it were never recorded (history
// was off, or the store predates it). Written once by the materializer.
func beginKey(cluster string) []byte { return join("a", cluster) }

// removedSeqKey holds, per cluster, the highest sequence whose change
// retention removed. Written by retention only.
func removedSeqKey(cluster string) []byte { return join("m", cluster) }

// markBegun records the cluster's history start once per process.
func (w *writer) markBegun() error {
	w.s.mu.Lock()
	done := w.s.histBegun[w.cluster]
	w.s.mu.Unlock()
	if done {
		return nil
	}
	if _, err := w.txn.Get(beginKey(w.cluster)); errors.Is(err, bdg.ErrKeyNotFound) {
		seq, _, err := checkpoint(w.txn, w.cluster)
		if err != nil {
			return err
		}
		if err := w.set(beginKey(w.cluster), binary.BigEndian.AppendUint64(nil, seq)); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	w.s.mu.Lock()
	w.s.histBegun[w.cluster] = true
	w.s.mu.Unlock()
	return nil
}

// markStarted records when the store first kept history, and that its
// revisions' keys all have the uid in its current form (packedRevsKey):
// a store that kept history before has a start already.
func (s *Store) markStarted(now time.Time) error {
	return s.db.Update(func(txn *bdg.Txn) error {
		if _, err := txn.Get(beganKey); !errors.Is(err, bdg.ErrKeyNotFound) {
			return err
		}
		if err := txn.Set(packedRevsKey, nil); err != nil {
			return err
		}
		return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano())))
	})
}

// runRetention removes what falls out of the window every RetainInterval
// until ctx ends.
func (s *Store) runRetention(ctx context.Context) {
	t := time.NewTicker(s.hist.RetainInterval)
	defer t.Stop()
	for {
		if err := s.Retain(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.log.Error("history retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retainBatch bounds the changes one retention transaction removes.
const retainBatch = 128

// Retain removes the changes observed before now minus the retention, and,
// while the history is over its byte budget, the oldest others. Each
// object's oldest kept revision stays a snapshot: removing a revision
// that the next one patches rewrites the next one as a snapshot. The
// newest revision of a live object is kept past the window (without its
// feed entries) as the base of its next change, which then replaces it
// with a snapshot (history.go, recordUpsert).
func (s *Store) Retain(ctx context.Context, now time.Time) error {
	if !s.hist.enabled() {
		return nil
	}
	pins := &s.interned.pins
	pins.pass.Lock()
	defer pins.pass.Unlock()
	cutoff := now.Add(-s.hist.Retention).UnixNano()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		total, err := s.historyBytes()
		if err != nil {
			return err
		}
		more, err := s.retainSome(cutoff, total)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	pins.watch()
	before, err := s.labelsUnused()
	before = pins.settle(before)
	if err != nil {
		return err
	}
	return s.retainLabels(before)
}

// historyBytes is the history's size over all clusters.
func (s *Store) historyBytes() (int64, error) {
	var total int64
	err := s.db.View(func(txn *bdg.Txn) error {
		for _, fam := range []byte{'h', 'g'} {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{fam, sep}, PrefetchValues: true})
			for it.Rewind(); it.Valid(); it.Next() {
				err := it.Item().Value(func(v []byte) error {
					if len(v) != 8 {
						return errCorrupt
					}
					if fam == 'h' {
						total += int64(binary.BigEndian.Uint64(v))
					} else {
						total -= int64(binary.BigEndian.Uint64(v))
					}
					return nil
				})
				if err != nil {
					it.Close()
					return err
				}
			}
			it.Close()
		}
		return nil
	})
	return total, err
}

// retainSome removes up to retainBatch changes in one transaction and
// reports whether there may be more to remove.
func (s *Store) retainSome(cutoff, total int64) (bool, error) {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	removed := map[string]int64{}
	maxSeq := map[string]uint64{}
	var expired int64
	n := 0
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'t', sep}, PrefetchValues: true})
	type entry struct {
		key []byte
		val []byte
	}
	var todo []entry
	for it.Rewind(); it.Valid() && len(todo) < retainBatch; it.Next() {
		k := it.Item().KeyCopy(nil)
		t, _, _, err := splitTimeKey(k)
		if err != nil {
			it.Close()
			return false, err
		}
		if t > cutoff && total <= s.hist.MaxBytes {
			break
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			it.Close()
			return false, err
		}
		total -= int64(len(k) + len(v)) // about: the revision's bytes come off too
		todo = append(todo, entry{k, v})
	}
	it.Close()
	if len(todo) == 0 {
		return false, nil
	}
	for _, e := range todo {
		t, cluster, seq, _ := splitTimeKey(e.key)
		freed, err := s.removeChange(txn, e.key, e.val, cluster, seq)
		if err != nil {
			return false, fmt.Errorf("remove change %s/%d: %w", cluster, seq, err)
		}
		removed[cluster] += freed
		maxSeq[cluster] = max(maxSeq[cluster], seq)
		expired = max(expired, t)
		n++
	}
	for c, freed := range removed {
		prev, err := readInt(txn, removedKey(c))
		if err != nil {
			return false, err
		}
		if err := txn.Set(removedKey(c), binary.BigEndian.AppendUint64(nil, uint64(prev+freed))); err != nil {
			return false, err
		}
		old, err := readInt(txn, removedSeqKey(c))
		if err != nil {
			return false, err
		}
		if int64(maxSeq[c]) > old {
			if err := txn.Set(removedSeqKey(c), binary.BigEndian.AppendUint64(nil, maxSeq[c])); err != nil {
				return false, err
			}
		}
	}
	was, err := readInt(txn, expiredKey)
	if err != nil {
		return false, err
	}
	if err := txn.Set(expiredKey, binary.BigEndian.AppendUint64(nil, uint64(max(was, expired)))); err != nil {
		return false, err
	}
	return n == retainBatch, txn.Commit()
}

// removeChange removes one change (its feed entries and, unless it is the
// newest revision of a live object, its revision and the older ones of
// the object) and returns the bytes it freed.
func (s *Store) removeChange(txn *bdg.Txn, tkey, tval []byte, cluster string, seq uint64) (int64, error) {
	c, err := decodeChange(tval, false)
	if err != nil {
		return 0, err
	}
	freed := int64(len(tkey) + len(tval))
	if err := txn.Delete(tkey); err != nil {
		return 0, err
	}
	if c.typ == query.ChangeDeleted {
		xkey := append([]byte{'x'}, tkey[1:]...)
		freed += int64(len(xkey))
		if c.format == changeFormatV1 {
			freed += int64(len(tval)) // an older binary's x/ value: a copy of the t/ one
		}
		if err := txn.Delete(xkey); err != nil {
			return 0, err
		}
	}
	t, _, _, err := splitTimeKey(tkey)
	if err != nil {
		return 0, err
	}
	dk := changedKey(c.gvr, t, cluster, c.ns, c.name)
	freed += int64(len(dk))
	if err := txn.Delete(dk); err != nil {
		return 0, err
	}
	fk := feedKey(cluster, c.gvr, seq)
	freed += int64(len(fk) + 8)
	if c.format == changeFormatV1 {
		freed += int64(len(c.uid)) // an older binary's f/ value led with the uid
	}
	if err := txn.Delete(fk); err != nil {
		return 0, err
	}
	live := false
	if item, err := txn.Get(uidKey(cluster, c.gvr, c.uid)); err == nil {
		err = item.Value(func(v []byte) error {
			u, err := decodeUIDEntry(v, c.gvr, cluster)
			live = err == nil && u.head.seq == seq
			return err
		})
		if err != nil {
			return 0, err
		}
	} else if !errors.Is(err, bdg.ErrKeyNotFound) {
		return 0, err
	}
	f, err := s.dropRevisions(txn, cluster, c.gvr, c.uid, seq, live)
	if err != nil {
		return 0, err
	}
	freed += f
	if !live {
		// Was it the object's last revision? Then its name leads nowhere.
		last := true
		if err := scanRevisions(txn, cluster, c.gvr, c.uid, seq+1, false, func(uint64, *bdg.Item) (bool, error) {
			last = false
			return false, nil
		}); err != nil {
			return 0, err
		}
		if last {
			nk := nameKey(cluster, c.gvr, c.ns, c.name, c.uid)
			freed += int64(len(nk))
			if err := txn.Delete(nk); err != nil {
				return 0, err
			}
		}
	}
	return freed, nil
}

// dropRevisions deletes the object's revisions up to seq (before it when
// keep). A revision's state comes from newer ones, never older, so what
// is left needs no rewrite.
func (s *Store) dropRevisions(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, seq uint64, keep bool) (int64, error) {
	var freed int64
	var keys [][]byte
	err := scanRevisions(txn, cluster, gvr, uid, 0, false, func(at uint64, item *bdg.Item) (bool, error) {
		if at > seq || (keep && at == seq) {
			return false, nil
		}
		k := item.KeyCopy(nil)
		freed += int64(len(k)) + item.ValueSize()
		keys = append(keys, k)
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return 0, err
		}
	}
	return freed, nil
}
