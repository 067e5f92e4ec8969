package badger

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Options configures the store.
type Options struct {
	Dir    string
	Logger *slog.Logger
	// MemTableSize bounds each Badger memtable, and with it the largest
	// transaction (15 % of it). Default 64 MiB.
	MemTableSize int64
	// KeepPageCache leaves the value log's freshly written pages to the
	// kernel instead of dropping them once they are on disk (see
	// recycle_linux.go).
	KeepPageCache bool
	// ValueLogFileSize is the size at which Badger starts a new value-log
	// file, the unit the value-log GC reclaims. Default 256 MiB.
	ValueLogFileSize int64
	// ValueLogGCInterval is how often the store rewrites value-log files
	// that are mostly superseded objects (valuelog_gc.go). Default 10
	// minutes; negative turns it off.
	ValueLogGCInterval time.Duration

	// BulkLoad is for a store that is filled before anyone reads it (a
	// rebuild): level-0 tables wait until there are 20, not 10, before
	// they are merged into the levels below. Merging early buys nothing
	// without readers, and every merge rewrites the level it merges into:
	// a 1M-object replay writes ~10 level-0 tables, so compaction ran at
	// most once, near the end, where closing the store waited for it (up
	// to 3 s). The next open, with the usual limit, merges them in the
	// background.
	BulkLoad bool

	// ValueIndex lists the fields and images the value index keeps
	// (valueindex.go); nil is DefaultValueIndex.
	ValueIndex []IndexedValue

	// NoRelations turns the relationship index off (relate.go): the
	// hub's default, without --relations (cmd/fleetview/app/indexes.go),
	// and the baseline of the relations benchmark. Related and relation
	// field selectors then answer ErrNotKept.
	NoRelations bool
	// NoCounters turns the counters off (counters.go): counts then read
	// the indexes. The hub keeps them with --count-index.
	NoCounters bool
	// History keeps every change for a retention window (history.go);
	// off when its bounds are zero.
	History HistoryOptions

	// l0Tables, when set, replaces how many level-0 tables wait before
	// compaction (tests: 1 has compaction, and with it the value log's
	// discard statistics, follow each flush).
	l0Tables int
	// compression, when set, replaces lsmCompression's choice (tests
	// measuring each: TestHistoryDiskBytesPerChange).
	compression *options.CompressionType
	// unaware makes the store write as a binary that predates the
	// counters (tests): it neither keeps nor stamps them, nor touches
	// their marker.
	unaware bool
}

// Store is the Badger backend: a materializer.Sink and a reader.
type Store struct {
	db  *bdg.DB
	log *slog.Logger

	mu sync.Mutex
	// flights holds, per cluster stream, the writes of the batch whose
	// commit is in flight, so the next batch, prepared meanwhile, reads
	// them (see Prepare).
	flights map[string]*flight
	// written is a Bloom filter of the primary keys this process wrote,
	// and fresh the cluster streams that had nothing in the store when
	// this process first wrote them. For those, a key absent from the
	// filter is absent from the store: an initial load or a replay skips
	// the lookup of a new object's previous labels, a miss through every
	// memtable and level. One filter for all clusters keeps memory fixed
	// (about 5 MB); past its capacity it only lets more lookups through.
	written *keyFilter
	fresh   map[string]bool
	// vindex is the value index's configuration (valueindex.go).
	vindex *valueIndex
	// counters: the counters are kept, and were since the store was empty
	// (counters.go).
	counters bool
	// slabs holds the chunks pipelined batches encode their records into.
	slabs *slabPools
	// stopBackground stops the value log's page recycler
	// (recycle_linux.go) and garbage collector (valuelog_gc.go) and waits
	// for them.
	stopBackground func()
	// kinds holds the resources whose kind index entry this process wrote
	// (relate.go); noRelations is Options.NoRelations.
	kinds       sync.Map
	noRelations bool
	hist        HistoryOptions
	// histBegun: the clusters whose history start (beginKey, history_retain.go) is known
	// to be recorded.
	histBegun map[string]bool
	// histLegacy: writers write the history as the binary before its
	// compact forms did (history_format.go), for the tests that read such
	// a store.
	histLegacy bool
	// histSerial: the history's pre-stage only reads (history_pre.go; tests).
	histSerial bool
	// interned: the history's label sets known committed (history_labels.go)
	interned *internCache
}

// Open opens or creates the store in dir.
func Open(o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ValueLogGCInterval == 0 {
		o.ValueLogGCInterval = 10 * time.Minute
	}
	if o.History.SnapshotEvery > maxSnapshotEvery {
		return nil, fmt.Errorf("%w: HistoryOptions.SnapshotEvery is %d, at most %d", errBadOption, o.History.SnapshotEvery, maxSnapshotEvery)
	}
	db, err := bdg.Open(badgerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("open badger store %s: %w", o.Dir, err)
	}
	if o.History.SnapshotEvery <= 0 {
		o.History.SnapshotEvery = defaultSnapshotEvery
	}
	if o.History.RetainInterval == 0 {
		o.History.RetainInterval = time.Minute
	}
	s := &Store{db: db, log: o.Logger, flights: map[string]*flight{}, written: newKeyFilter(), fresh: map[string]bool{}, slabs: newSlabPools(),
		noRelations: o.NoRelations, hist: o.History, histBegun: map[string]bool{}, interned: newInternCache()}
	if err := s.openValueIndex(withNameIndex(o.ValueIndex, o.NoRelations)); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.openCounters(o.NoCounters, o.unaware); err != nil {
		_ = db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if !o.KeepPageCache {
		wg.Go(func() { runRecycler(ctx, o.Dir, o.Logger) })
	}
	if o.ValueLogGCInterval > 0 {
		wg.Go(func() { s.runValueLogGC(ctx, o.ValueLogGCInterval) })
	}
	if s.hist.enabled() {
		err := s.markStarted(time.Now())
		if err == nil {
			err = s.indexChanged()
		}
		if err != nil {
			cancel()
			wg.Wait()
			return nil, errors.Join(err, db.Close())
		}
		if s.hist.RetainInterval > 0 {
			wg.Go(func() { s.runRetention(ctx) })
		}
	}
	s.stopBackground = func() {
		cancel()
		wg.Wait()
	}
	return s, nil
}

// badgerOptions are the Badger options of a store opened with o (its
// defaults applied).
func badgerOptions(o Options) bdg.Options {
	if o.MemTableSize <= 0 {
		o.MemTableSize = 64 << 20
	}
	if o.ValueLogFileSize <= 0 {
		o.ValueLogFileSize = 256 << 20
	}
	l0, l0Stall := cmp.Or(o.l0Tables, 10), 20
	if o.BulkLoad {
		l0, l0Stall = 20, 40
	}
	opts := bdg.DefaultOptions(o.Dir).
		WithLogger(nil).
		WithNumVersionsToKeep(1).
		// Objects live on disk; these bound what Badger keeps in memory:
		// at most NumMemtables memtables of MemTableSize (keys, labels
		// and value pointers: object JSON above ValueThreshold goes to the
		// value log), a block cache and an index cache (table indices and
		// bloom filters beyond it are read from disk).
		WithMemTableSize(o.MemTableSize).WithNumLevelZeroTables(l0).WithNumLevelZeroTablesStall(l0Stall).
		WithNumMemtables(3).
		WithBlockCacheSize(64 << 20).
		WithIndexCacheSize(32 << 20).
		WithValueThreshold(1 << 10).
		WithValueLogFileSize(o.ValueLogFileSize).
		WithNumCompactors(2).
		WithCompression(lsmCompression(o)).
		// One writer per cluster stream, and streams write disjoint keys
		// (the cluster is in every key): conflict tracking is pure cost.
		WithDetectConflicts(false)
	return opts
}

// lsmCompression is how the LSM's table blocks are compressed. Without
// history the LSM holds keys, label sets and value pointers, a small
// part of the store beside the value log: compressing its blocks saved
// little and cost an update about a fifth more CPU. With history it
// holds every change's revision, feed and index entries, which ZSTD
// (level 1) writes in about a third of their bytes, at no measured cost
// to ingest or reads (docs/benchmarks/history.md, 2026-12-07 21:10).
// Each table records its own compression (Badger's manifest), so a
// store written either way, or both, reads the same.
func lsmCompression(o Options) options.CompressionType {
	if o.compression != nil {
		return *o.compression
	}
	if o.History.enabled() {
		return options.ZSTD
	}
	return options.None
}

// Close stops the page recycler and the value-log GC, then flushes and
// closes the store.
func (s *Store) Close() error {
	s.stopBackground()
	return s.db.Close()
}

var _ materializer.Sink = (*Store)(nil)

// Checkpoint implements materializer.Sink.
func (s *Store) Checkpoint(_ context.Context, cluster string) (uint64, error) {
	var seq uint64
	err := s.db.View(func(txn *bdg.Txn) error {
		var err error
		seq, _, err = checkpoint(txn, cluster)
		return err
	})
	return seq, err
}

// checkpoint is cluster's checkpoint in txn; ok is false when the store
// holds none.
func checkpoint(txn *bdg.Txn, cluster string) (seq uint64, ok bool, err error) {
	it, err := txn.Get(ckptKey(cluster))
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	err = it.Value(func(v []byte) error {
		if len(v) != 8 {
			return errCorrupt
		}
		seq = binary.BigEndian.Uint64(v)
		return nil
	})
	return seq, err == nil, err
}

// Apply implements materializer.Sink. A batch too big for one transaction is
// committed in prefixes, each with the checkpoint of its own last event, so
// the store never holds a checkpoint that does not match its contents. A
// single event too big for one transaction (removing a resource with many
// objects) is committed in parts without moving the checkpoint: after a
// crash the removal is applied again and deletes what is left.
func (s *Store) Apply(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) error {
	if err := s.waitFlight(cluster); err != nil {
		return err
	}
	w, err := s.newWriter(ctx, cluster, nil, nil)
	if err != nil {
		return err
	}
	defer func() {
		w.txn.Discard()
		w.unpinLabels()
	}()
	if err := w.prefetchPrevious(events); err != nil {
		return err
	}
	defer w.relatePrepass(events)()
	var applied uint64
	for i := 0; i < len(events); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := w.apply(&events[i])
		if errors.Is(err, bdg.ErrTxnTooBig) && applied > 0 {
			if err := w.commit(applied); err != nil {
				return err
			}
			w.renew()
			i--
			applied = 0
			continue
		}
		if errors.Is(err, bdg.ErrTxnTooBig) && w.writes > 0 && events[i].Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			if err := w.flushCounts(); err != nil {
				return err
			}
			if err := w.txn.Commit(); err != nil {
				return err
			}
			w.renew()
			i--
			continue
		}
		if err != nil {
			return fmt.Errorf("apply seq %d: %w", events[i].Seq, err)
		}
		applied = events[i].Seq
	}
	return w.commit(lastSeq)
}

var _ materializer.PipelinedSink = (*Store)(nil)

// Prepare implements materializer.PipelinedSink: it builds the batch's
// transaction while the previous batch of the stream may still be in
// Badger's writer. That transaction's snapshot does not include the
// previous batch, so reads go to the previous batch's writes first.
func (s *Store) Prepare(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) (materializer.Prepared, error) {
	prev, txn := s.takeFlight(cluster)
	w, err := s.newWriter(ctx, cluster, prev, txn)
	if err != nil {
		return nil, err
	}
	w.slab = &slab{pools: s.slabs}
	if err := w.prefetchPrevious(events); err != nil {
		w.discard()
		return nil, err
	}
	defer w.relatePrepass(events)()
	for i := range events {
		e := &events[i]
		if err := ctx.Err(); err != nil {
			w.discard()
			return nil, err
		}
		err := w.apply(e)
		if errors.Is(err, bdg.ErrTxnTooBig) {
			// Rare (batches far above the default): apply it the slow way,
			// in prefixes, once the previous batch is durable.
			w.discard()
			if err := s.Apply(ctx, cluster, events, lastSeq); err != nil {
				return nil, err
			}
			return materializer.Committed{}, nil
		}
		if err != nil {
			w.discard()
			return nil, fmt.Errorf("apply seq %d: %w", e.Seq, err)
		}
	}
	if err := w.setCheckpoint(lastSeq); err != nil {
		w.discard()
		return nil, err
	}
	return &prepared{s: s, w: w}, nil
}

type prepared struct {
	s *Store
	w *writer
}

// Commit implements materializer.Prepared.
func (p *prepared) Commit() <-chan error {
	out := make(chan error, 1)
	// The next batch's transaction is begun now: begun after this commit
	// took its timestamp, it would wait for the commit to finish (Badger
	// gives a new transaction a snapshot of everything committed), which
	// would undo the pipelining. Its snapshot lacks this batch; the overlay
	// makes up for that.
	f := &flight{ov: p.w.ov, done: make(chan struct{}), next: p.s.db.NewTransaction(true)}
	p.s.setFlight(p.w.cluster, f)
	p.w.txn.CommitWith(func(err error) {
		if err == nil {
			p.w.committed()
		} else {
			p.w.unpinLabels()
		}
		p.w.slab.release()
		f.err = err
		close(f.done)
		p.s.clearFlight(p.w.cluster, f)
		out <- err
	})
	return out
}

// Discard implements materializer.Prepared.
func (p *prepared) Discard() { p.w.discard() }

// flight is a batch whose commit is in flight.
type flight struct {
	ov   *overlay
	done chan struct{}
	err  error
	next *bdg.Txn // for the next batch; nil once taken or discarded
}

func (s *Store) setFlight(cluster string, f *flight) {
	s.mu.Lock()
	s.flights[cluster] = f
	s.mu.Unlock()
}

func (s *Store) clearFlight(cluster string, f *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[cluster] == f {
		delete(s.flights, cluster)
	}
	if f.next != nil {
		f.next.Discard()
		f.next = nil
	}
}

// takeFlight returns the writes of the cluster's batch in flight and the
// transaction begun for the batch after it, if any.
func (s *Store) takeFlight(cluster string) (*overlay, *bdg.Txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flights[cluster]
	if f == nil {
		return nil, nil
	}
	txn := f.next
	f.next = nil
	return f.ov, txn
}

// knownKeys is the filter of written keys when it holds every primary key
// of the cluster's stream in the store, or nil.
func (s *Store) knownKeys(ctx context.Context, cluster string) (*keyFilter, error) {
	s.mu.Lock()
	fresh, ok := s.fresh[cluster]
	s.mu.Unlock()
	if !ok {
		// Every commit writes the checkpoint: without one, the store holds
		// nothing of this stream.
		ckpt, err := s.Checkpoint(ctx, cluster)
		if err != nil {
			return nil, err
		}
		fresh = ckpt == 0
		s.mu.Lock()
		s.fresh[cluster] = fresh
		s.mu.Unlock()
	}
	if !fresh {
		return nil, nil
	}
	return s.written, nil
}

// keyFilter is a Bloom filter of keys, safe for concurrent use.
type keyFilter struct {
	mu sync.Mutex
	b  *z.Bloom
}

func newKeyFilter() *keyFilter { return &keyFilter{b: z.NewBloomFilter(1<<22, 0.01)} }

func (f *keyFilter) add(key []byte) {
	h := z.MemHash(key)
	f.mu.Lock()
	f.b.Add(h)
	f.mu.Unlock()
}

func (f *keyFilter) mayHave(key []byte) bool {
	h := z.MemHash(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.b.Has(h)
}

// waitFlight waits for the cluster's batch in flight, so a synchronous
// write never overtakes it, and never follows one that failed.
func (s *Store) waitFlight(cluster string) error {
	s.mu.Lock()
	f := s.flights[cluster]
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	<-f.done
	return f.err
}
