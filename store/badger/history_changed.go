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

// The resource's change index (H/, doc.go) answers an as-of list's
// "which of this resource's objects changed since t" from the resource's
// own changes after t: the fleet's change index (t/) is ordered by time
// first, so it would make a list of Pods read every change of every
// resource and cluster since t, and the per-cluster feed (f/) is ordered
// by stream sequence, which is not the order of the times it records (a
// time is the collector's observation: relists, a restarted collector's
// clock and publishes buffered in an outage do not follow the stream's
// order), so no sequence bounds the changes after a time exactly.
//
// Its keys are ordered by cluster and namespace before the time, so a
// list limited to a cluster or a namespace reads only that cluster's or
// namespace's changes after t, and any list reads each (cluster,
// namespace)'s from t on after one seek. Until 2026-12-07 the index was
// D/<gvr>/<time>/<namespace>/<name>/<cluster> (time first: a list of one
// namespace read every cluster's and namespace's changes of the resource
// after t); a store holding it is reindexed at open (indexChanged).

// changedFamily is the index's key family; oldChangedFamily the one of
// its time-first predecessor, which an open drops.
const (
	changedFamily    = 'H'
	oldChangedFamily = 'D'
)

// changedPrefix is the resource's part of its H/ keys.
func changedPrefix(g schema.GroupVersionResource) []byte {
	return append(join(string(rune(changedFamily)), g.Group, g.Version, g.Resource), sep)
}

// changedKey is H/<group>/<version>/<resource>/<cluster>/<namespace>/<time 8 BE>/<name>,
// with no value: the cluster, namespace and name are the object's key
// tail (as in o/), which is all an as-of list needs, so the index is read
// from keys alone. Two changes of an object at the same time share the
// key: the set is the same, and retention, which removes the older
// changes first, removes it with the first of them, after which neither
// is after any time in the window.
func changedKey(g schema.GroupVersionResource, t int64, cluster, ns, name string) []byte {
	b := append(append(append(append(changedPrefix(g), cluster...), sep), ns...), sep)
	b = binary.BigEndian.AppendUint64(b, uint64(t))
	return append(append(b, sep), name...)
}

// splitChangedKey is what changedKey joined, from the key past the
// resource's prefix. The time may hold the separator byte: it is found
// by its place after the namespace, and the name after it.
func splitChangedKey(k []byte) (cluster, ns []byte, t int64, name []byte, err error) {
	c := bytes.IndexByte(k, sep)
	if c < 0 {
		return nil, nil, 0, nil, errCorrupt
	}
	n := bytes.IndexByte(k[c+1:], sep)
	if n < 0 {
		return nil, nil, 0, nil, errCorrupt
	}
	n += c + 1
	if len(k) < n+1+8+1 || k[n+9] != sep {
		return nil, nil, 0, nil, errCorrupt
	}
	return k[:c], k[c+1 : n], int64(binary.BigEndian.Uint64(k[n+1 : n+9])), k[n+10:], nil
}

// changedIndexedKey marks a store whose H/ index holds every change the
// t/ index holds: set when history begins, or once an older store's
// changes are indexed (indexChanged). oldChangedIndexedKey was D/'s.
var (
	changedIndexedKey    = []byte{'b', sep, changedFamily}
	oldChangedIndexedKey = []byte{'b', sep, oldChangedFamily}
)

// indexChanged writes the H/ entries of the changes a store recorded
// before it kept that index, once, before the store is served (Open: no
// writer or retention runs yet). A store holding the time-first D/ index
// (or a binary before H/ wrote D/ entries since H/ was made: a
// downgrade) has D/ dropped and H/ made again from t/. The entries count
// in the history's bytes like the ones the materializer writes, and the
// dropped ones leave them.
func (s *Store) indexChanged() error {
	var indexed, old bool
	err := s.db.View(func(txn *bdg.Txn) error {
		for _, m := range []struct {
			key []byte
			set *bool
		}{{changedIndexedKey, &indexed}, {oldChangedIndexedKey, &old}} {
			_, err := txn.Get(m.key)
			if err != nil && !errors.Is(err, bdg.ErrKeyNotFound) {
				return err
			}
			*m.set = err == nil
		}
		if !old {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{oldChangedFamily, sep}})
			defer it.Close()
			it.Rewind()
			old = it.Valid()
		}
		return nil
	})
	if err != nil || indexed && !old {
		return err
	}
	// D/'s cluster ends its keys; H/'s follows the resource.
	if err := s.dropFamily(oldChangedFamily, func(k []byte) []byte { return k[bytes.LastIndexByte(k, sep)+1:] }); err != nil {
		return err
	}
	if err := s.dropFamily(changedFamily, func(k []byte) []byte {
		parts := bytes.SplitN(k, []byte{sep}, 6) // H, group, version, resource, cluster, rest
		if len(parts) < 6 {
			return nil
		}
		return parts[4]
	}); err != nil {
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
		if err := addHistBytes(txn, added); err != nil {
			return err
		}
		if err := txn.Delete(oldChangedIndexedKey); err != nil {
			return err
		}
		return txn.Set(changedIndexedKey, nil)
	})
}

// addHistBytes adds n[cluster] to each cluster's history bytes (h/).
func addHistBytes(txn *bdg.Txn, n map[string]int64) error {
	for c, d := range n {
		was, err := readInt(txn, addedKey(c))
		if err != nil {
			return err
		}
		if err := txn.Set(addedKey(c), binary.BigEndian.AppendUint64(nil, uint64(was+d))); err != nil {
			return err
		}
	}
	return nil
}

// dropFamily deletes every key of a history family whose keys hold no
// value, taking their bytes from their cluster's history bytes in the
// same transaction as the deletes (a chunk at a time, so a store of any
// size; one stopped halfway leaves bytes and keys agreeing).
func (s *Store) dropFamily(family byte, clusterOf func(k []byte) []byte) error {
	const chunk = 10000
	for {
		done := false
		err := s.db.Update(func(txn *bdg.Txn) error {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{family, sep}})
			var keys [][]byte
			for it.Rewind(); it.Valid() && len(keys) < chunk; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
			done = len(keys) < chunk
			removed := map[string]int64{}
			for _, k := range keys {
				removed[string(clusterOf(k))] -= int64(len(k))
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return addHistBytes(txn, removed)
		})
		if err != nil || done {
			return err
		}
	}
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
// resource's change index (H/) from t on, keys only. Each (cluster,
// namespace) of the resource costs a seek to its changes after t and the
// entry it lands on past them; a cluster or namespace the list leaves out
// costs at most the entry that leads to the seek past it, not its
// changes.
func changedSince(ctx context.Context, txn *bdg.Txn, o query.ListOptions, clusters map[string]bool, t int64) ([][]byte, int, error) {
	prefix := changedPrefix(o.GVR)
	var wanted []string // sorted; nil: every cluster
	for c := range clusters {
		wanted = append(wanted, c)
	}
	slices.Sort(wanted)
	if clusters != nil && len(wanted) == 0 {
		return nil, 0, nil
	}
	after := binary.BigEndian.AppendUint64(nil, uint64(t+1))
	// seek is the key of group (cluster, namespace)'s changes after t.
	seek := func(cluster, ns []byte) []byte {
		b := append(append(append(append(bytes.Clone(prefix), cluster...), sep), ns...), sep)
		return append(b, after...)
	}
	// nextCluster is where the clusters after cluster start: its own
	// keys all have the separator after its name.
	nextCluster := func(cluster []byte) []byte {
		return append(append(bytes.Clone(prefix), cluster...), sep+1)
	}
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var tails [][]byte
	read := 0
	start := prefix
	if wanted != nil {
		start = append(bytes.Clone(prefix), wanted[0]...)
	}
	for it.Seek(start); it.Valid(); {
		if err := ctx.Err(); err != nil {
			return nil, read, err
		}
		read++
		cluster, ns, at, name, err := splitChangedKey(it.Item().Key()[len(prefix):])
		if err != nil {
			return nil, read, err
		}
		switch {
		case wanted != nil && !clusters[string(cluster)]:
			i, _ := slices.BinarySearch(wanted, string(cluster))
			if i == len(wanted) {
				return sortedTails(tails), read, nil
			}
			it.Seek(append(bytes.Clone(prefix), wanted[i]...))
		case o.Namespace != "" && string(ns) < o.Namespace:
			it.Seek(seek(cluster, []byte(o.Namespace)))
		case o.Namespace != "" && string(ns) > o.Namespace:
			it.Seek(nextCluster(cluster))
		case at <= t:
			it.Seek(seek(cluster, ns))
		default:
			tl := make([]byte, 0, len(ns)+len(name)+len(cluster)+2)
			tails = append(tails, append(append(append(append(append(tl, ns...), sep), name...), sep), cluster...))
			it.Next()
		}
	}
	return sortedTails(tails), read, nil
}

// sortedTails sorts tails and drops repeats (an object's several changes).
func sortedTails(tails [][]byte) [][]byte {
	slices.SortFunc(tails, bytes.Compare)
	return slices.CompactFunc(tails, bytes.Equal)
}
