package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/query"
)

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions() (query.Version, error) {
	v := query.Version{}
	err := s.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
}

// versionsOf puts the checkpoints of the selected clusters into v (nil:
// every cluster's). A list of a few clusters reads their keys alone: a
// scan of every checkpoint was a large share of the CPU of a one-cluster
// list at 1,000 clusters, a cost of the clusters it does not touch
// (measured: docs/benchmarks/fleet.md#2000-clusters-x-500-pods-the-issues-scale-2026-12-04).
func versionsOf(txn *bdg.Txn, v query.Version, clusters []string) error {
	if clusters == nil {
		return versions(txn, v)
	}
	for _, c := range clusters {
		seq, ok, err := checkpoint(txn, c)
		if err != nil {
			return err
		}
		if ok {
			v[c] = seq
		}
	}
	return nil
}

func versions(txn *bdg.Txn, v query.Version) error {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: ckptPrefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		cluster := string(it.Item().Key()[len(ckptPrefix):])
		if err := it.Item().Value(func(b []byte) error {
			if len(b) != 8 {
				return errCorrupt
			}
			v[cluster] = binary.BigEndian.Uint64(b)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ReaderOptions bound the list snapshots a Reader keeps.
type ReaderOptions struct {
	// SnapshotTTL is how long the continue tokens of one list stay valid
	// (Kubernetes: until etcd compacts, about 5 minutes). Later pages are
	// ErrExpired.
	SnapshotTTL time.Duration
	// MaxSnapshots bounds the open snapshots. When a new list needs one
	// and all are taken, the oldest snapshot of the client holding the
	// most is dropped (its tokens expire early), so a client paging
	// within its fair share is never the one evicted.
	MaxSnapshots int
	// MaxSnapshotsPerClient bounds the snapshots one client (ListOptions.
	// Client) holds: its next list drops its own oldest, never another
	// client's, so one client's paging cannot expire everyone's continue
	// tokens. 0: no quota of its own (MaxSnapshots still applies).
	MaxSnapshotsPerClient int
}

// Reader is the Badger read path: Get, List with snapshot-pinned paging,
// and Search. Every page of a list is read from the Badger read transaction
// of its first page, held open until the snapshot expires, so a paged list
// is one consistent cut of the store even while the materializer writes
// (Badger keeps the versions an open read transaction can see).
type Reader struct {
	db   *bdg.DB
	opts ReaderOptions
	// vindex says which counts the value index answers.
	vindex *valueIndex
	// counters: the store keeps counters (counters.go).
	counters bool
	// noRelations: the store keeps no relationship index
	// (Options.NoRelations); Related and relation field selectors are
	// ErrNotKept rather than empty answers.
	noRelations bool
	now         func() time.Time

	mu     sync.Mutex
	snaps  *query.Snapshots[*snapshot] // by id, with the quota
	closed bool
	// walks are Related's walks between calls (Reader.walk).
	walks sync.Pool
}

type snapshot struct {
	mu      sync.Mutex // one page at a time; guards txn use against Discard
	txn     *bdg.Txn
	version query.Version
	total   int64 // objects matched by the whole list, -1 when unknown
	expires time.Time
	done    bool
	client  string // who opened it: the quota it counts against
	// asOf is an as-of list's changed set, read by its first page
	// (history_changed.go).
	asOf *asOfChanged
}

// Reader returns the read path of the store.
func (s *Store) Reader(o ReaderOptions) *Reader {
	if o.SnapshotTTL <= 0 {
		o.SnapshotTTL = 5 * time.Minute
	}
	if o.MaxSnapshots <= 0 {
		o.MaxSnapshots = 1024
	}
	return &Reader{db: s.db, vindex: s.vindex, counters: s.counters, noRelations: s.noRelations, opts: o, now: time.Now, snaps: query.NewSnapshots[*snapshot](o.MaxSnapshots, o.MaxSnapshotsPerClient)}
}

// Close discards every held snapshot; later continue tokens are expired.
// Call it before closing the store.
func (r *Reader) Close() error {
	r.mu.Lock()
	snaps := r.snaps.Clear()
	r.closed = true
	r.mu.Unlock()
	for _, s := range snaps {
		s.discard()
	}
	return nil
}

func (s *snapshot) discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.done = true
		s.txn.Discard()
	}
}

// Versions is the store's checkpoint per cluster.
func (r *Reader) Versions(_ context.Context) (query.Version, error) {
	v := query.Version{}
	err := r.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
}

// Get returns one object. With no cluster, the object must be in exactly
// one visible cluster; copies the caller may not see are skipped unread.
func (r *Reader) Get(ctx context.Context, o query.GetOptions) (query.Object, error) {
	if !o.AsOf.IsZero() {
		return r.getAsOf(ctx, o)
	}
	gvr := o.GVR
	out := query.Object{GVR: gvr, Checked: true}
	read := func(it *bdg.Item) error {
		return it.Value(func(v []byte) error {
			r, err := decodeRecord(v, false)
			out.JSON = append([]byte(nil), r.json...)
			out.Cells = bytes.Clone(r.cells)
			return err
		})
	}
	err := r.db.View(func(txn *bdg.Txn) error {
		if o.Cluster != "" {
			if !o.Sees(o.Cluster) {
				return o.NotFound()
			}
			it, err := txn.Get(objKey(gvr, o.Namespace, o.Name, o.Cluster))
			if errors.Is(err, bdg.ErrKeyNotFound) {
				return o.NotFound()
			}
			if err != nil {
				return err
			}
			out.Cluster = o.Cluster
			return read(it)
		}
		prefix := append(join("o", gvr.Group, gvr.Version, gvr.Resource, o.Namespace, o.Name), sep)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		var clusters []string
		for it.Rewind(); it.Valid(); it.Next() {
			c := string(it.Item().Key()[len(prefix):])
			if !o.Sees(c) {
				continue
			}
			clusters = append(clusters, c)
			if len(clusters) == 1 {
				out.Cluster = c
				if err := read(it.Item()); err != nil {
					return err
				}
			}
		}
		switch len(clusters) {
		case 0:
			return o.NotFound()
		case 1:
			return nil
		}
		return o.Conflict(clusters)
	})
	if err != nil {
		return query.Object{}, err
	}
	return out, nil
}

// clusterSet is nil for "every cluster" (a nil list) and the set otherwise.
func clusterSet(cs []string) map[string]bool {
	if cs == nil {
		return nil
	}
	set := make(map[string]bool, len(cs))
	for _, c := range cs {
		set[c] = true
	}
	return set
}
