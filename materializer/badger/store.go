package badger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Options configures the store.
type Options struct {
	Dir    string
	Logger *slog.Logger
}

// Store is the Badger backend: a materializer.Sink and a reader.
type Store struct {
	db  *bdg.DB
	log *slog.Logger
}

// Open opens or creates the store in dir.
func Open(o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	opts := bdg.DefaultOptions(o.Dir).
		WithLogger(nil).
		WithNumVersionsToKeep(1).
		// Objects live on disk; these bound what Badger keeps in memory:
		// at most NumMemtables memtables of MemTableSize (keys, labels
		// and value pointers: object JSON above ValueThreshold goes to the
		// value log), a block cache and an index cache (table indices and
		// bloom filters beyond it are read from disk).
		WithMemTableSize(32 << 20).
		WithNumMemtables(3).
		WithBlockCacheSize(64 << 20).
		WithIndexCacheSize(32 << 20).
		WithValueThreshold(1 << 10).
		WithValueLogFileSize(256 << 20).
		WithNumCompactors(2).
		// The LSM holds keys, label sets and value pointers: compressing
		// its blocks costs CPU and saves little.
		WithCompression(options.None).
		// One writer per cluster stream, and streams write disjoint keys
		// (the cluster is in every key): conflict tracking is pure cost.
		WithDetectConflicts(false)
	db, err := bdg.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger store %s: %w", o.Dir, err)
	}
	return &Store{db: db, log: o.Logger}, nil
}

// Close flushes and closes the store.
func (s *Store) Close() error { return s.db.Close() }

var _ materializer.Sink = (*Store)(nil)

// Checkpoint implements materializer.Sink.
func (s *Store) Checkpoint(_ context.Context, cluster string) (uint64, error) {
	var seq uint64
	err := s.db.View(func(txn *bdg.Txn) error {
		it, err := txn.Get(ckptKey(cluster))
		if errors.Is(err, bdg.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if len(v) != 8 {
				return errCorrupt
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	return seq, err
}

// Apply implements materializer.Sink. A batch too big for one transaction is
// committed in prefixes, each with the checkpoint of its own last event, so
// the store never holds a checkpoint that does not match its contents.
func (s *Store) Apply(ctx context.Context, cluster string, events []materializer.Event, lastSeq uint64) error {
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	var applied uint64
	for i := 0; i < len(events); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.applyOne(txn, cluster, events[i])
		if errors.Is(err, bdg.ErrTxnTooBig) && applied > 0 {
			if err := s.commit(txn, cluster, applied); err != nil {
				return err
			}
			txn = s.db.NewTransaction(true)
			i--
			applied = 0
			continue
		}
		if err != nil {
			return fmt.Errorf("apply seq %d: %w", events[i].Seq, err)
		}
		applied = events[i].Seq
	}
	return s.commit(txn, cluster, lastSeq)
}

func (s *Store) commit(txn *bdg.Txn, cluster string, seq uint64) error {
	v := make([]byte, 8)
	binary.BigEndian.PutUint64(v, seq)
	if err := txn.Set(ckptKey(cluster), v); err != nil {
		return err
	}
	return txn.Commit()
}

func (s *Store) applyOne(txn *bdg.Txn, cluster string, e materializer.Event) error {
	ev := e.Event
	gvr := stream.GVR(ev.GetGvr())
	switch ev.GetType() {
	case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
		return s.upsert(txn, cluster, gvr, e, ev)
	case fleetviewv1.EventType_EVENT_TYPE_DELETE:
		return s.deleteUID(txn, cluster, gvr, ev.GetUid())
	case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return s.removeResource(txn, cluster, gvr)
	}
	return nil // sync markers carry no object state
}

func (s *Store) upsert(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, e materializer.Event, ev *fleetviewv1.ResourceEvent) error {
	seq, lbls := e.Seq, e.Labels
	if !e.Labeled {
		var err error
		if lbls, err = materializer.ObjectLabels(ev.GetObject()); err != nil {
			return materializer.Poison(seq, "object of %s/%s: %v", ev.GetNamespace(), ev.GetName(), err)
		}
	}
	key := objKey(gvr, ev.GetNamespace(), ev.GetName(), cluster)
	old, err := s.oldLabels(txn, key)
	if err != nil {
		return err
	}
	for k, v := range old {
		if nv, ok := lbls[k]; !ok || nv != v {
			if err := txn.Delete(labelKey(gvr, k, v, ev.GetNamespace(), ev.GetName(), cluster)); err != nil {
				return err
			}
		}
	}
	for k, v := range lbls {
		if ov, ok := old[k]; ok && ov == v {
			continue
		}
		if err := txn.Set(labelKey(gvr, k, v, ev.GetNamespace(), ev.GetName(), cluster), nil); err != nil {
			return err
		}
	}
	if err := txn.Set(key, encodeRecord(record{seq: seq, labels: lbls, json: ev.GetObject()})); err != nil {
		return err
	}
	return txn.Set(uidKey(cluster, gvr, ev.GetUid()), key)
}

func (s *Store) oldLabels(txn *bdg.Txn, key []byte) (map[string]string, error) {
	it, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var old map[string]string
	err = it.Value(func(v []byte) error {
		r, err := decodeRecord(v, true)
		old = r.labels
		return err
	})
	return old, err
}

func (s *Store) deleteUID(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string) error {
	ukey := uidKey(cluster, gvr, uid)
	it, err := txn.Get(ukey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil // never materialized, or already gone
	}
	if err != nil {
		return err
	}
	key, err := it.ValueCopy(nil)
	if err != nil {
		return err
	}
	// A deleted-and-recreated object keeps its name under a new uid; when
	// the new one was applied before the old one's tombstone, the key holds
	// the new object, which must stay.
	same, err := s.holdsUID(txn, key, uid)
	if err != nil {
		return err
	}
	if same {
		if err := s.deleteObject(txn, gvr, key); err != nil {
			return err
		}
	}
	return txn.Delete(ukey)
}

// holdsUID reports whether the object at key has the uid.
func (s *Store) holdsUID(txn *bdg.Txn, key []byte, uid string) (bool, error) {
	it, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var same bool
	err = it.Value(func(v []byte) error {
		r, err := decodeRecord(v, false)
		if err != nil {
			return err
		}
		var m struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(r.json, &m); err != nil {
			return err
		}
		// Objects without a uid in their JSON (never from a collector) are
		// trusted to be the indexed one.
		same = m.Metadata.UID == "" || m.Metadata.UID == uid
		return nil
	})
	return same, err
}

func (s *Store) deleteObject(txn *bdg.Txn, gvr schema.GroupVersionResource, key []byte) error {
	ns, name, cluster, err := tail(key)
	if err != nil {
		return err
	}
	old, err := s.oldLabels(txn, key)
	if err != nil {
		return err
	}
	for k, v := range old {
		if err := txn.Delete(labelKey(gvr, k, v, ns, name, cluster)); err != nil {
			return err
		}
	}
	return txn.Delete(key)
}

func (s *Store) removeResource(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource) error {
	prefix := uidPrefix(cluster, gvr)
	var keys [][]byte
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range keys {
		uid := string(k[len(prefix):])
		if err := s.deleteUID(txn, cluster, gvr, uid); err != nil {
			return err
		}
	}
	return nil
}
