package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// Counters answer the counts a fleet asks most (Pods by cluster x phase,
// by image, per cluster and namespace) from O(groups) keys instead of
// O(objects):
//
//	C/<group>/<version>/<resource>/<dimension>/<cluster>/<namespace>/<value> -> count (8 bytes BE)
//
// <dimension> "" (value "") counts the objects of a cluster and
// namespace; a value index dimension (status.phase, image) counts its
// objects per value. A counter moves with the entry that decides it, in
// the same write: the object's o/ record (added, deleted) and its X/ value
// pairs (old value -1, new value +1), so an update that changes neither
// writes no counter, and a transaction holds a counter's change exactly
// when it holds that entry (writeCounted reserves room for both at once:
// a batch split for its size never commits one without the other). The
// changes are summed per key over the transaction and written once, at
// its commit (flushCounts): a batch of 1,000 Pods in a namespace writes
// a handful of keys. A counter that reaches zero is deleted, so a
// removed resource or cluster leaves no key.
//
// Counters are kept when Options.NoCounters is off and were kept since the
// store was empty (countersKey records that): a store that held objects
// before is counted from its indexes until `fleetview rebuild`, as is one
// a binary that does not keep counters wrote to since (its checkpoints
// lack countedMeta; doc.go). A count
// is answered from counters when nothing but clusters, a namespace and
// the caller's visibility selects (no label or field selector) and it
// groups by cluster, namespace, kind and at most one value dimension;
// visibility is judged per (cluster, namespace), exactly as the index
// path judges each key, so member RBAC narrowing holds. Label keys are
// not counted: their values are unbounded (pod-template-hash), and
// counts by them stay on the label index.

// countersKey records that counters were kept since the store was empty.
var countersKey = []byte("M\x00counters")

func counterKey(g schema.GroupVersionResource, dim, cluster, ns, value string) []byte {
	return join("C", g.Group, g.Version, g.Resource, dim, cluster, ns, value)
}

func counterPrefix(g schema.GroupVersionResource, dim string) []byte {
	return append(join("C", g.Group, g.Version, g.Resource, dim), sep)
}

// cdelta is one counter's change.
type cdelta struct {
	key []byte
	n   int64
}

// objectDelta is the change of the object count an object of gvr in ns
// adds (n 1) or removes (n -1); none when counters are not kept.
func (w *writer) objectDelta(gvr schema.GroupVersionResource, ns string, n int64) []cdelta {
	if !w.s.counters {
		return nil
	}
	return []cdelta{{key: counterKey(gvr, "", w.cluster, ns, ""), n: n}}
}

// pairDeltas are the counter changes of an object whose value pairs go
// from old to now.
func (w *writer) pairDeltas(gvr schema.GroupVersionResource, ns string, old, now []vpair) []cdelta {
	if !w.s.counters {
		return nil
	}
	var ds []cdelta
	for _, p := range old {
		if !containsPair(now, p) {
			ds = append(ds, cdelta{key: counterKey(gvr, p.dim, w.cluster, ns, p.value), n: -1})
		}
	}
	for _, p := range now {
		if !containsPair(old, p) {
			ds = append(ds, cdelta{key: counterKey(gvr, p.dim, w.cluster, ns, p.value), n: 1})
		}
	}
	return ds
}

func containsPair(ps []vpair, p vpair) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// writeCounted writes k (v, or its delete when del) with the counter
// changes it decides: room for the entry and for every counter the
// transaction does not hold yet is taken at once, so either all land in
// this transaction or none does.
func (w *writer) writeCounted(k, v []byte, del bool, ds []cdelta) error {
	if len(ds) == 0 {
		if del {
			return w.del(k)
		}
		return w.set(k, v)
	}
	n, size := int64(1), entrySize(k, len(v))
	for i, d := range ds {
		if _, ok := w.cnt[string(d.key)]; ok || dupKey(ds[:i], d.key) {
			continue
		}
		n++
		size += entrySize(d.key, 8)
	}
	if err := w.reserve(n, size); err != nil {
		return err
	}
	var err error
	if del {
		err = w.txn.Delete(k)
	} else {
		err = w.txn.Set(k, v)
	}
	if err := w.count(err); err != nil {
		return err
	}
	if w.cnt == nil {
		w.cnt = map[string]int64{}
	}
	for _, d := range ds {
		w.cnt[string(d.key)] += d.n
	}
	return nil
}

func dupKey(ds []cdelta, k []byte) bool {
	for _, d := range ds {
		if bytes.Equal(d.key, k) {
			return true
		}
	}
	return false
}

// flushCounts writes the transaction's counter changes (their room was
// taken by writeCounted) before its commit.
func (w *writer) flushCounts() error {
	for k, d := range w.cnt {
		if d == 0 && !w.zero[k] {
			continue
		}
		cur, err := w.storedCount(k)
		if err != nil {
			return err
		}
		n := cur + d
		if w.zero[k] {
			if n = d; n == 0 && cur == 0 {
				continue
			}
		}
		if n < 0 {
			// Cannot happen while every change travels with its entry;
			// a count below zero would be worse than a wrong one.
			w.s.log.Error("counter below zero: kept at zero", "key", fmt.Sprintf("%q", k), "count", n)
			n = 0
		}
		key := []byte(k)
		if n == 0 {
			err = w.txn.Delete(key)
		} else {
			err = w.txn.Set(key, binary.BigEndian.AppendUint64(nil, uint64(n)))
		}
		if err := w.count(err); err != nil {
			return err
		}
		if w.ov.counts == nil {
			w.ov.counts = map[string]int64{}
		}
		w.ov.counts[k] = n
	}
	w.cnt, w.zero = nil, nil
	return nil
}

// zeroCounters makes the counters of gvr in the writer's cluster zero
// before the transaction's later changes, once its removal deleted every
// object: whatever they held, the resource has none left. They hold
// exactly its objects while every write kept them; this covers the one
// write the checkpoint stamp (countedMeta) does not see: a removal too
// big for one transaction, which a binary keeping no counters left half
// done (its parts move no checkpoint), replayed here over what is left.
// The counts are not read here but at the commit (flushCounts), after
// the batch in flight summed its own; a key takes room once, and a
// removal with more counters than a transaction holds zeroes them over
// several (Apply commits its parts).
func (w *writer) zeroCounters(gvr schema.GroupVersionResource) error {
	if !w.s.counters {
		return nil
	}
	keys := map[string]bool{}
	dims := []string{""}
	for _, d := range w.s.vindex.of(gvr.GroupResource()) {
		dims = append(dims, d.IndexName())
	}
	for _, dim := range dims {
		p := string(append(append(counterPrefix(gvr, dim), w.cluster...), sep))
		it := w.txn.NewIterator(bdg.IteratorOptions{Prefix: []byte(p)})
		for it.Rewind(); it.Valid(); it.Next() {
			keys[string(it.Item().Key())] = true
		}
		it.Close()
		for _, m := range []map[string]int64{w.cnt, w.ov.counts, w.prev.countsOrNil()} {
			for k := range m {
				if strings.HasPrefix(k, p) {
					keys[k] = true
				}
			}
		}
	}
	if w.cnt == nil {
		w.cnt = map[string]int64{}
	}
	if w.zero == nil {
		w.zero = map[string]bool{}
	}
	for k := range keys {
		_, pending := w.cnt[k]
		if n, ok := w.ov.counts[k]; ok && n == 0 && !pending {
			continue // this batch's earlier part deleted it
		}
		if !pending {
			if err := w.reserve(1, entrySize([]byte(k), 8)); err != nil {
				return err
			}
			w.writes++ // written at the commit: a part holding it commits
		}
		w.cnt[k], w.zero[k] = 0, true
	}
	return nil
}

func (o *overlay) countsOrNil() map[string]int64 {
	if o == nil {
		return nil
	}
	return o.counts
}

// storedCount is a counter's value: this batch's, the one in flight's,
// else the snapshot's.
func (w *writer) storedCount(k string) (int64, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil || o.counts == nil {
			continue
		}
		if n, ok := o.counts[k]; ok {
			return n, nil
		}
	}
	return readInt(w.txn, []byte(k))
}

// countedMeta is the user meta byte of a checkpoint written by a
// binary that kept the counters in the same transaction. A binary that
// predates the counters writes its checkpoints without it (it neither
// keeps the counters nor knows their marker, so it cannot drop the
// marker as NoCounters does); reading checkpoints ignores the byte, so
// such a binary still runs on the store.
const countedMeta byte = 0x43 // 'C'

// stampedCheckpoint is cluster's checkpoint entry, stamped as written
// with the counters kept.
func stampedCheckpoint(cluster string, v []byte) *bdg.Entry {
	return bdg.NewEntry(ckptKey(cluster), v).WithMeta(countedMeta)
}

// openCounters decides whether counters are kept: on, kept since the
// store was empty, and every cluster's checkpoint stamped (no binary that
// does not keep them wrote since). Off, the record goes, so counters a
// later process finds were kept throughout; unaware (tests) opens as a
// binary that predates the counters: it touches nothing of theirs.
func (s *Store) openCounters(off, unaware bool) error {
	if unaware {
		return nil
	}
	fresh := false
	err := s.db.Update(func(txn *bdg.Txn) error {
		_, err := txn.Get(countersKey)
		kept := err == nil
		if err != nil && !errors.Is(err, bdg.ErrKeyNotFound) {
			return err
		}
		switch {
		case off && kept:
			return txn.Delete(countersKey)
		case off:
			return nil
		case kept:
			foreign, err := unstampedCheckpoint(txn)
			if err != nil || foreign != "" {
				if err == nil {
					s.log.Warn("counters: a binary that does not keep them wrote to the store since; counts read the indexes until `fleetview rebuild`", "cluster", foreign)
					err = txn.Delete(countersKey)
				}
				return err
			}
			s.counters = true
			return nil
		case emptyStore(txn):
			s.counters, fresh = true, true
			if err := stampCheckpoints(txn); err != nil {
				return err
			}
			return txn.Set(countersKey, nil)
		}
		s.log.Warn("counters: the store holds objects written without them; counts read the indexes until `fleetview rebuild`")
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	// An empty store may still hold counters of objects since deleted
	// while counters were off: they start again from zero.
	return s.db.DropPrefix([]byte{'C', sep})
}

// unstampedCheckpoint is a cluster whose checkpoint a binary that does
// not keep the counters wrote ("" when none: O(clusters) keys).
func unstampedCheckpoint(txn *bdg.Txn) (string, error) {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: ckptPrefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if it.Item().UserMeta() != countedMeta {
			return string(it.Item().Key()[len(ckptPrefix):]), nil
		}
	}
	return "", nil
}

// stampCheckpoints stamps the checkpoints of a store without objects,
// whose counters start from zero (their clusters' objects were deleted).
func stampCheckpoints(txn *bdg.Txn) error {
	type ckpt struct{ cluster, v []byte }
	var cs []ckpt
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: ckptPrefix, PrefetchValues: true})
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			it.Close()
			return err
		}
		cs = append(cs, ckpt{it.Item().KeyCopy(nil)[len(ckptPrefix):], v})
	}
	it.Close()
	for _, c := range cs {
		if err := txn.SetEntry(stampedCheckpoint(string(c.cluster), c.v)); err != nil {
			return err
		}
	}
	return nil
}

// fromCounters reports whether counters answer the count of one resource:
// no selector but clusters and a namespace, at most one value dimension
// the value index keeps, no label dimension.
func (c *counter) fromCounters(on bool) bool {
	if !on || c.o.Fields != nil || !c.o.LabelSelector().Empty() {
		return false
	}
	values := 0
	for _, d := range c.o.By {
		switch {
		case d.Kind == query.DimCluster, d.Kind == query.DimNamespace, d.Kind == query.DimKind:
		case d.IndexName() != "" && c.vi.answers(c.gr, d):
			values++
		default:
			return false
		}
	}
	return values <= 1
}

// counted counts one resource from its counters: the object counts make
// the total (an object in two image rows counts once), and the rows when
// no value dimension is asked; else the dimension's counters make them.
func (c *counter) counted() error {
	c.seen, c.intern = map[string]bool{}, map[string]string{}
	c.row = make([]string, len(c.o.By))
	dim := ""
	for _, d := range c.o.By {
		if d.IndexName() != "" {
			dim = d.IndexName()
		}
	}
	if err := c.readCounters("", dim == "", true); err != nil {
		return err
	}
	if dim == "" {
		return nil
	}
	return c.readCounters(dim, true, false)
}

// readCounters reads one dimension's counters, into the rows and or the
// total, of the selected clusters only. Every batch rewrites the
// counters it changes, and until compaction the scan steps over their
// older versions (13x at 150 rewrites, BenchmarkCountersRead); a seek
// past each key and point Gets were measured and cost more where
// versions are few (docs/benchmarks/counts.md, 2026-12-07 05:30 UTC).
func (c *counter) readCounters(dim string, rows, total bool) error {
	prefix := counterPrefix(c.gvr, dim)
	ranges := [][]byte{prefix}
	if c.clusters != nil {
		ranges = ranges[:0]
		for cl := range c.clusters {
			ranges = append(ranges, append(append(bytes.Clone(prefix), cl...), sep))
		}
	}
	for _, p := range ranges {
		it := c.txn.NewIterator(bdg.IteratorOptions{Prefix: p})
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			rest := item.Key()[len(prefix):]
			cluster, after, ok1 := bytes.Cut(rest, []byte{sep})
			ns, value, ok2 := bytes.Cut(after, []byte{sep})
			if !ok1 || !ok2 {
				it.Close()
				return fmt.Errorf("counter %q: %w", item.Key(), errCorrupt)
			}
			if !c.selected(ns, cluster) {
				continue
			}
			var n int64
			if err := item.Value(func(v []byte) error {
				if len(v) != 8 {
					return errCorrupt
				}
				n = int64(binary.BigEndian.Uint64(v))
				return nil
			}); err != nil {
				it.Close()
				return fmt.Errorf("counter %q: %w", item.Key(), err)
			}
			if total {
				c.t.Total += n
			}
			if rows && len(c.o.By) > 0 {
				c.addCounted(cluster, ns, value, n)
			}
		}
		it.Close()
	}
	return nil
}

// addCounted adds n objects to the row of cluster, namespace and value.
func (c *counter) addCounted(cluster, ns, value []byte, n int64) {
	c.joined = c.joined[:0]
	for i, d := range c.o.By {
		var v string
		switch d.Kind {
		case query.DimCluster:
			v = c.str(cluster)
		case query.DimNamespace:
			v = c.str(ns)
		case query.DimKind:
			v = c.kindValue()
		default:
			v = c.str(value)
		}
		if i > 0 {
			c.joined = append(c.joined, sep)
		}
		c.joined = append(c.joined, v...)
		c.row[i] = v
	}
	c.t.Add(c.joined, c.row, n)
}
