package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
)

// The registries are read with ordered pull consumers on the bucket's
// stream, not with jetstream.KeyValue's ListKeys and Watch: those make push
// consumers, whose deliver subject is a subject of the hub's account, and
// the hub refuses push consumers to a collector with per-cluster
// credentials (natsserver's guard). A pull consumer's messages only go back
// to the one who fetched them.

// entryOp is the KV operation a bucket message records.
func entryOp(m jetstream.Msg) jetstream.KeyValueOp { return headerOp(m.Headers()) }

// headerOp is the KV operation a bucket message's headers record, also as
// republished (Follower).
func headerOp(h nats.Header) jetstream.KeyValueOp {
	switch h.Get("KV-Operation") {
	case "DEL":
		return jetstream.KeyValueDelete
	case "PURGE":
		return jetstream.KeyValuePurge
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// registryConsumer is an ordered consumer over the last message of every
// registry key (from then on, every new one).
func (s *Store) registryConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := s.js.OrderedConsumer(ctx, natsnames.KVStream(natsnames.RegistryBucket), jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{natsnames.KVKeys(natsnames.RegistryBucket)},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		NamePrefix:        s.consumerPrefix(),
		InactiveThreshold: natsnames.ReaderIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("read %s bucket: %w", natsnames.RegistryBucket, err)
	}
	return cons, nil
}

// Specs reads every registry as stored (spec, no per-cluster conditions),
// sorted by name: what a collector needs, and all its credentials may read.
// Each is validated again (decodeStored); one that fails is an error, since
// the registries are the hub's to write and acting on some of them would
// route or collect the wrong resources.
func (s *Store) Specs(ctx context.Context) ([]*registry.ResourceRegistry, error) {
	held, _, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return specsOf(held)
}

// read reads the last message of every registry key: per key its stream
// sequence and registry (or that it was deleted, or fails validation), and
// upTo, the highest sequence read. Everything the stream held up to upTo is
// in it: the consumer reads until nothing is pending, and every message of
// the stream is a key's.
//
// It also reads at least up to the stream's last sequence as the stream's
// leader (which answers stream info) tells it before the read: in a NATS
// cluster the consumer reads a replica, which may not hold yet what the
// leader stored and republished a moment ago, before a Follower
// subscribed. So a snapshot reflects everything stored before it began.
func (s *Store) read(ctx context.Context) (held map[string]heldEntry, upTo uint64, err error) {
	st, err := s.js.Stream(ctx, natsnames.KVStream(natsnames.RegistryBucket))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s bucket: %w", natsnames.RegistryBucket, err)
	}
	var last uint64
	if state := st.CachedInfo().State; state.Msgs > 0 {
		last = state.LastSeq
	}
	cons, err := s.registryConsumer(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		// Gone by its inactive threshold anyway; deleting it now keeps a
		// busy reader from piling consumers up on the shared stream.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.js.DeleteConsumer(dctx, natsnames.KVStream(natsnames.RegistryBucket), cons.CachedInfo().Name)
	}()
	held = map[string]heldEntry{}
	behind := time.Now().Add(10 * time.Second)
	for pending := cons.CachedInfo().NumPending; pending > 0 || upTo < last; {
		// Ask for no more than is pending: a fetch waits for a full
		// batch until its deadline. With nothing pending the replica is
		// behind the leader: wait for one more message, a while.
		n, wait := int(min(pending, 256)), 5*time.Second
		if pending == 0 {
			if time.Now().After(behind) {
				return nil, 0, fmt.Errorf("read %s bucket: read up to sequence %d, the stream's leader holds %d", natsnames.RegistryBucket, upTo, last)
			}
			n, wait = 1, 500*time.Millisecond
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, 0, fmt.Errorf("read %s bucket: %w", natsnames.RegistryBucket, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, 0, fmt.Errorf("read %s bucket: %w", natsnames.RegistryBucket, err)
			}
			pending = md.NumPending
			upTo = max(upTo, md.Sequence.Stream)
			key := registryKey(m.Subject())
			e := heldEntry{seq: md.Sequence.Stream}
			if entryOp(m) == jetstream.KeyValuePut {
				e.reg, e.err = decodeStored(key, m.Data())
			} else {
				e.deleted = true
			}
			held[key] = e
		}
		if err := batch.Error(); err != nil {
			return nil, 0, fmt.Errorf("read %s bucket: %w", natsnames.RegistryBucket, err)
		}
		if got == 0 && pending > 0 {
			return nil, 0, fmt.Errorf("read %s bucket: nothing delivered with %d pending", natsnames.RegistryBucket, pending)
		}
	}
	return held, upTo, nil
}

// Watch follows the registries bucket as jetstream.KeyValue's WatchAll
// does: the last entry of every key, then a nil entry once those are in,
// then every change. Entries carry key, value, revision and operation.
// Stop ends it; the updates channel is then closed.
func (s *Store) Watch(ctx context.Context) (jetstream.KeyWatcher, error) {
	cons, err := s.registryConsumer(ctx)
	if err != nil {
		return nil, err
	}
	w := &pullWatcher{updates: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{})}
	initial := cons.CachedInfo().NumPending
	if initial == 0 {
		w.updates <- nil
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		e := &kvEntry{key: registryKey(m.Subject()), value: m.Data(), revision: md.Sequence.Stream,
			created: md.Timestamp, delta: md.NumPending, op: entryOp(m)}
		if !w.send(e) {
			return
		}
		if initial > 0 && md.NumPending == 0 {
			initial = 0 // the callback runs on one goroutine at a time
			w.send(nil)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s bucket: %w", natsnames.RegistryBucket, err)
	}
	w.stop = func() {
		cc.Stop()
		<-cc.Closed()
	}
	return w, nil
}

// pullWatcher is the jetstream.KeyWatcher of Watch.
type pullWatcher struct {
	updates  chan jetstream.KeyValueEntry
	done     chan struct{}
	stop     func()
	stopOnce sync.Once
}

// send delivers e unless the watcher was stopped (a reader that stopped
// reading must not block the consumer's goroutine for ever).
func (w *pullWatcher) send(e jetstream.KeyValueEntry) bool {
	select {
	case w.updates <- e:
		return true
	case <-w.done:
		return false
	}
}

func (w *pullWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *pullWatcher) Stop() error {
	w.stopOnce.Do(func() {
		close(w.done)
		w.stop()
		close(w.updates)
	})
	return nil
}

// kvEntry is one registries bucket entry as Watch reports it.
type kvEntry struct {
	key      string
	value    []byte
	revision uint64
	created  time.Time
	delta    uint64
	op       jetstream.KeyValueOp
}

func (e *kvEntry) Bucket() string                  { return natsnames.RegistryBucket }
func (e *kvEntry) Key() string                     { return e.key }
func (e *kvEntry) Value() []byte                   { return e.value }
func (e *kvEntry) Revision() uint64                { return e.revision }
func (e *kvEntry) Created() time.Time              { return e.created }
func (e *kvEntry) Delta() uint64                   { return e.delta }
func (e *kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// registryKey is the registry bucket key a message of its stream is for.
func registryKey(subject string) string {
	key, _ := natsnames.KVKey(natsnames.RegistryBucket, subject) // the consumers filter on the bucket's keys
	return key
}
