package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// The resource's change index (D/, doc.go) answers an as-of list's
// "which of this resource's objects changed since t" from the resource's
// own changes after t: the fleet's change index (t/) is ordered by time
// first, so it would make a list of Pods read every change of every
// resource and cluster since t, and the per-cluster feed (f/) is ordered
// by stream sequence, which is not the order of the times it records (a
// time is the collector's observation: relists, a restarted collector's
// clock and publishes buffered in an outage do not follow the stream's
// order), so no sequence bounds the changes after a time exactly.

// changedPrefix is the resource's part of its D/ keys.
func changedPrefix(g schema.GroupVersionResource) []byte {
	return append(join("D", g.Group, g.Version, g.Resource), sep)
}

// changedKey is D/<group>/<version>/<resource>/<time 8 BE>/<namespace>/<name>/<cluster>,
// with no value: its end is the object's key tail (as in o/), which is
// all an as-of list needs, so the index is read from keys alone. Two
// changes of an object at the same time share the key: the set is the
// same, and retention, which removes the older changes first, removes it
// with the first of them, after which neither is after any time in the
// window.
func changedKey(g schema.GroupVersionResource, t int64, cluster, ns, name string) []byte {
	b := binary.BigEndian.AppendUint64(changedPrefix(g), uint64(t))
	b = append(append(append(append(append(append(b, sep), ns...), sep), name...), sep), cluster...)
	return b
}

// changedIndexedKey marks a store whose D/ index holds every change the
// t/ index holds: set when history begins, or once an older store's
// changes are indexed (indexChanged).
var changedIndexedKey = []byte{'b', sep, 'D'}

// indexChanged writes the D/ entries of the changes a store recorded
// before it kept that index, once, before the store is served (Open: no
// writer or retention runs yet). The entries count in the history's bytes
// like the ones the materializer writes.
func (s *Store) indexChanged() error {
	err := s.db.View(func(txn *bdg.Txn) error {
		_, err := txn.Get(changedIndexedKey)
		return err
	})
	if !errors.Is(err, bdg.ErrKeyNotFound) {
		return err
	}
	added := map[string]int64{}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	err = s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'t', sep}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			t, cluster, _, err := splitTimeKey(it.Item().Key())
			if err != nil {
				return err
			}
			var c changeEntry
			if err := it.Item().Value(func(v []byte) (err error) {
				c, err = decodeChange(v, false)
				return err
			}); err != nil {
				return err
			}
			k := changedKey(c.gvr, t, cluster, c.ns, c.name)
			added[cluster] += int64(len(k))
			if err := wb.Set(k, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	return s.db.Update(func(txn *bdg.Txn) error {
		for c, n := range added {
			was, err := readInt(txn, addedKey(c))
			if err != nil {
				return err
			}
			if err := txn.Set(addedKey(c), binary.BigEndian.AppendUint64(nil, uint64(was+n))); err != nil {
				return err
			}
		}
		return txn.Set(changedIndexedKey, nil)
	})
}

// asOfChanged is an as-of list's changed set, read on its first page and
// kept with its snapshot for the later ones: the snapshot is the same,
// so the set is too.
type asOfChanged struct {
	key   string          // the list it answers (changedFor)
	tails [][]byte        // sorted, unique
	set   map[string]bool // the same tails, for the scan to leave out
}

// changedFor names what a changed set depends on: the time, resource,
// namespace and clusters of the list.
func changedFor(o query.ListOptions, t int64) string {
	cs := slices.Clone(o.Clusters)
	slices.Sort(cs)
	return strings.Join(append([]string{string(binary.BigEndian.AppendUint64(nil, uint64(t))), o.GVR.String(), o.Namespace}, cs...), "\x00")
}

// changedAfter is the list's changed set, from its snapshot when an
// earlier page read it, else read now and kept there.
func changedAfter(ctx context.Context, snap *snapshot, o query.ListOptions, clusters map[string]bool, t int64) (*asOfChanged, error) {
	key := changedFor(o, t)
	if c := snap.asOf; c != nil && c.key == key {
		return c, nil
	}
	tails, _, err := changedSince(ctx, snap.txn, o, clusters, t)
	if err != nil {
		return nil, err
	}
	c := &asOfChanged{key: key, tails: tails, set: make(map[string]bool, len(tails))}
	for _, tl := range tails {
		c.set[string(tl)] = true
	}
	snap.asOf = c
	return c, nil
}

// after is the part of the set past a cursor's tail.
func (c *asOfChanged) after(tail []byte) [][]byte {
	if tail == nil {
		return c.tails
	}
	i, found := slices.BinarySearchFunc(c.tails, tail, bytes.Compare)
	if found {
		i++
	}
	return c.tails[i:]
}

// changedSince are the tails (sorted, unique) of the list's objects with
// a change observed after t, and how many index entries it read: the
// resource's change index (D/) from t on, keys only, one per change of
// the resource.
func changedSince(ctx context.Context, txn *bdg.Txn, o query.ListOptions, clusters map[string]bool, t int64) ([][]byte, int, error) {
	var tails [][]byte
	prefix := changedPrefix(o.GVR)
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	read := 0
	for it.Seek(binary.BigEndian.AppendUint64(bytes.Clone(prefix), uint64(t+1))); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return nil, read, err
		}
		read++
		k := it.Item().Key()
		if len(k) < len(prefix)+9 {
			return nil, read, errCorrupt
		}
		tl := k[len(prefix)+9:]
		ns, _, cluster, err := tailBytes(tl)
		if err != nil {
			return nil, read, err
		}
		if clusters != nil && !clusters[string(cluster)] || o.Namespace != "" && string(ns) != o.Namespace {
			continue
		}
		tails = append(tails, bytes.Clone(tl))
	}
	slices.SortFunc(tails, bytes.Compare)
	return slices.CompactFunc(tails, bytes.Equal), read, nil
}
