package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// hydrateBatch is the most headers one fetch of hydrate asks for.
const hydrateBatch = 10_000

// hydrate rebuilds uid -> (namespace, name, resourceVersion) from the last
// message of every subject of this resource, reading headers only. Objects
// outside the current namespace scope get tombstones right away: a scope that
// shrank must not leave ghosts.
func (s *resourceSync) hydrate(ctx context.Context) error {
	s.ledger.clear()
	// One ephemeral consumer for the whole read, not an ordered one: each
	// Fetch of a nats.go ordered consumer makes a new consumer on the hub
	// (and deletes the last one in the background), two or more per
	// resource per resync, each a JetStream API create and delete the hub
	// serves. What the ordered consumer adds, noticing a lost delivery,
	// is checked here from the consumer sequences, and fails the hydrate,
	// which its resync retries.
	sname := stream.StreamName(s.cluster)
	cons, err := s.js.CreateConsumer(ctx, sname, jetstream.ConsumerConfig{
		// The hub lets a collector with per-cluster credentials make
		// consumers named with its own prefix only.
		Name:              natsnames.ConsumerNamePrefix(s.cluster),
		FilterSubject:     stream.ResourceFilter(s.cluster, s.w.gvr),
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: natsnames.ReaderIdle,
	})
	if err != nil {
		return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
	}
	defer func() {
		// Deleted even when ctx ended, within a bound; one the hub does
		// not answer for goes idle by itself (natsnames.ReaderIdle).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.js.DeleteConsumer(dctx, sname, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	var delivered uint64
	var stale []objRefUID
	for pending > 0 {
		// Ask for no more than is pending: a fetch waits for a full batch
		// until its deadline. Headers only, a few hundred bytes each.
		batch, err := cons.Fetch(int(min(pending, hydrateBatch)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
			}
			if md.Sequence.Consumer != delivered+1 {
				return fmt.Errorf("hydrate %s: delivery %d after %d: a message was lost", s.w.gvr, md.Sequence.Consumer, delivered)
			}
			delivered = md.Sequence.Consumer
			pending = md.NumPending
			h := m.Headers()
			if h.Get(stream.HdrType) != fleetviewv1.EventType_EVENT_TYPE_UPSERT.String() {
				continue
			}
			ps, err := stream.ParseSubject(m.Subject())
			if err != nil {
				return err
			}
			ref := objRef{rv: h.Get(stream.HdrRV), ns: h.Get(stream.HdrNamespace), name: h.Get(stream.HdrName)}
			if !s.w.inScope(ref.ns) {
				stale = append(stale, objRefUID{ref, ps.UID})
				continue
			}
			if (h.Get(stream.HdrSecretData) == stream.SecretDataKept) != s.w.keepsData(ref.ns) {
				// Published under the other Secret-data choice: publish
				// again even if unchanged.
				ref.stale = true
			}
			s.ledger.load(ps.UID, ref)
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		if n == 0 {
			return fmt.Errorf("hydrate %s: stream returned no messages with %d pending", s.w.gvr, pending)
		}
	}
	for _, st := range stale {
		if err := s.publishDelete(ctx, st.uid, st.ref); err != nil {
			return err
		}
	}
	s.log.Debug("hydrated from stream", "objects", s.ledger.size(), "outOfScope", len(stale))
	return nil
}
