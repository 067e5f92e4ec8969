package badger

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
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
		// Objects live on disk; these bound what Badger keeps in the heap.
		WithMemTableSize(32 << 20).
		WithBlockCacheSize(64 << 20).
		WithIndexCacheSize(32 << 20).
		WithValueThreshold(1 << 10)
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
		return s.upsert(txn, cluster, gvr, e.Seq, ev)
	case fleetviewv1.EventType_EVENT_TYPE_DELETE:
		return s.deleteUID(txn, cluster, gvr, ev.GetUid())
	case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return s.removeResource(txn, cluster, gvr)
	}
	return nil // sync markers carry no object state
}

func (s *Store) upsert(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, seq uint64, ev *fleetviewv1.ResourceEvent) error {
	var meta struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(ev.GetObject(), &meta); err != nil {
		return fmt.Errorf("%w: object of %s/%s: %v", materializer.ErrPoison, ev.GetNamespace(), ev.GetName(), err)
	}
	key := objKey(gvr, ev.GetNamespace(), ev.GetName(), cluster)
	old, err := s.oldLabels(txn, key)
	if err != nil {
		return err
	}
	for k, v := range old {
		if nv, ok := meta.Metadata.Labels[k]; !ok || nv != v {
			if err := txn.Delete(labelKey(gvr, k, v, ev.GetNamespace(), ev.GetName(), cluster)); err != nil {
				return err
			}
		}
	}
	for k, v := range meta.Metadata.Labels {
		if ov, ok := old[k]; ok && ov == v {
			continue
		}
		if err := txn.Set(labelKey(gvr, k, v, ev.GetNamespace(), ev.GetName(), cluster), nil); err != nil {
			return err
		}
	}
	if err := txn.Set(key, encodeRecord(record{seq: seq, labels: meta.Metadata.Labels, json: ev.GetObject()})); err != nil {
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
	if err := s.deleteObject(txn, gvr, key); err != nil {
		return err
	}
	return txn.Delete(ukey)
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

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions() (query.Version, error) {
	v := query.Version{}
	err := s.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
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

// Get returns one object. With cluster empty, the object must be in exactly
// one cluster.
func (s *Store) Get(_ context.Context, gvr schema.GroupVersionResource, namespace, name, cluster string) (query.Object, error) {
	var out query.Object
	err := s.db.View(func(txn *bdg.Txn) error {
		if cluster != "" {
			it, err := txn.Get(objKey(gvr, namespace, name, cluster))
			if errors.Is(err, bdg.ErrKeyNotFound) {
				return notFound(gvr, namespace, name, cluster)
			}
			if err != nil {
				return err
			}
			out.Cluster = cluster
			return it.Value(func(v []byte) error {
				r, err := decodeRecord(v, false)
				out.JSON = append([]byte(nil), r.json...)
				return err
			})
		}
		prefix := append(join("o", gvr.Group, gvr.Version, gvr.Resource, namespace, name), sep)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		var clusters []string
		for it.Rewind(); it.Valid(); it.Next() {
			c := string(it.Item().Key()[len(prefix):])
			clusters = append(clusters, c)
			if len(clusters) == 1 {
				out.Cluster = c
				if err := it.Item().Value(func(v []byte) error {
					r, err := decodeRecord(v, false)
					out.JSON = append([]byte(nil), r.json...)
					return err
				}); err != nil {
					return err
				}
			}
		}
		switch len(clusters) {
		case 0:
			return notFound(gvr, namespace, name, "")
		case 1:
			return nil
		}
		return fmt.Errorf("%w: %s %q found in clusters [%s]", query.ErrConflict, gvr.GroupResource(), qualified(namespace, name), strings.Join(clusters, ", "))
	})
	return out, err
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func notFound(gvr schema.GroupVersionResource, ns, name, cluster string) error {
	where := "any cluster"
	if cluster != "" {
		where = "cluster " + cluster
	}
	return fmt.Errorf("%w: %s %q in %s", query.ErrNotFound, gvr.GroupResource(), qualified(ns, name), where)
}

// List returns one page of objects ordered by namespace, name, cluster.
func (s *Store) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	var page query.Page
	after, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	clusters := map[string]bool{}
	for _, c := range o.Clusters {
		clusters[c] = true
	}
	sel := o.Labels
	if sel == nil {
		sel = labels.Everything()
	}
	err = s.db.View(func(txn *bdg.Txn) error {
		v := query.Version{}
		if err := versions(txn, v); err != nil {
			return err
		}
		for c := range v {
			if len(clusters) > 0 && !clusters[c] {
				delete(v, c)
			}
		}
		page.ResourceVersion = v.Encode()
		base, indexed := s.scanPrefix(o.GVR, sel)
		prefix := base
		if o.Namespace != "" {
			prefix = append(append(append([]byte{}, base...), o.Namespace...), sep)
		}
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: !indexed, PrefetchSize: 100})
		defer it.Close()
		start := prefix
		if after != "" {
			// Just past the last returned key: keys end with the cluster token.
			start = append(append(append([]byte{}, base...), after...), 1)
		}
		var lastNs, lastName, lastCluster string
		for it.Seek(start); it.Valid(); it.Next() {
			key := it.Item().Key()
			ns, name, cluster, err := tail(key)
			if err != nil {
				return err
			}
			if len(clusters) > 0 && !clusters[cluster] {
				continue
			}
			item := it.Item()
			if indexed {
				pi, err := txn.Get(objKey(o.GVR, ns, name, cluster))
				if err != nil {
					return fmt.Errorf("label index points at a missing object %s/%s in %s: %w", ns, name, cluster, err)
				}
				item = pi
			}
			var obj query.Object
			matched := false
			if err := item.Value(func(b []byte) error {
				r, err := decodeRecord(b, true)
				if err != nil {
					return err
				}
				if !sel.Matches(labels.Set(r.labels)) {
					return nil
				}
				matched = true
				obj = query.Object{Cluster: cluster, JSON: append([]byte(nil), r.json...)}
				return nil
			}); err != nil {
				return err
			}
			if !matched {
				continue
			}
			if o.Limit > 0 && int64(len(page.Items)) == o.Limit {
				page.Continue = encodeContinue(lastNs, lastName, lastCluster)
				return nil
			}
			page.Items = append(page.Items, obj)
			lastNs, lastName, lastCluster = ns, name, cluster
		}
		return nil
	})
	return page, err
}

// scanPrefix picks the label index when the selector has an equality
// requirement, else the resource's primary range.
func (s *Store) scanPrefix(gvr schema.GroupVersionResource, sel labels.Selector) ([]byte, bool) {
	reqs, _ := sel.Requirements()
	var best *labels.Requirement
	for i := range reqs {
		r := reqs[i]
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
		case selection.In:
			if r.Values().Len() != 1 {
				continue
			}
		default:
			continue
		}
		best = &r
		break
	}
	if best == nil {
		return objPrefix(gvr), false
	}
	vals := best.Values().List()
	sort.Strings(vals)
	return labelPrefix(gvr, best.Key(), vals[0]), true
}

func encodeContinue(ns, name, cluster string) string {
	return base64.RawURLEncoding.EncodeToString(join(ns, name, cluster))
}

func decodeContinue(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(strings.Split(string(b), "\x00")) != 3 {
		return "", fmt.Errorf("%w: continue token %q is malformed", query.ErrInvalid, s)
	}
	return string(b), nil
}
