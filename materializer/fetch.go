package materializer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// batch is what the fetching stage hands the applying stage.
type batch struct {
	evs  []feed.Event
	msgs []jetstream.Msg // msgs[i] carried evs[i]
	bad  []badMsg        // undecodable messages, in stream order
	last jetstream.Msg
	seq  uint64 // stream sequence of last
	err  error  // the fetching stage stopped with this error
}

type badMsg struct {
	msg    jetstream.Msg
	reason error
}

// fetchAll is the fetching stage: it hands on batches past ckpt until ctx
// ends or fetching fails (that batch carries the error), then closes
// batches.
func (m *Materializer) fetchAll(ctx context.Context, it jetstream.MessagesContext, ckpt uint64, size int, batches chan<- batch) {
	defer close(batches)
	var delivered uint64 // the consumer sequence of the last delivery
	for ctx.Err() == nil {
		b := m.fetch(ctx, it, ckpt, size, &delivered)
		if b.last == nil && b.err == nil {
			continue
		}
		select {
		case batches <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
		ckpt = b.seq
	}
}

// fetch collects up to size messages. It flushes early when the stream
// has nothing more pending (so a watch sees a trickle of changes at once),
// and otherwise waits at most FlushInterval once the first one arrived (so
// bulk ingest fills its batches).
func (m *Materializer) fetch(ctx context.Context, it jetstream.MessagesContext, ckpt uint64, size int, delivered *uint64) batch {
	var b batch
	bctx := ctx
	for len(b.evs)+len(b.bad) < size {
		msg, err := it.Next(jetstream.NextContext(bctx))
		if err != nil {
			if bctx.Err() != nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			b.err = err
			return b
		}
		if b.last == nil && b.err == nil && bctx == ctx {
			var cancel context.CancelFunc
			bctx, cancel = context.WithTimeout(ctx, m.cfg.FlushInterval)
			defer cancel()
		}
		md, err := msg.Metadata()
		if err != nil {
			b.err = err
			return b
		}
		// Every delivery, redeliveries too, takes the consumer's next
		// sequence: a jump means one was lost. The batch up to it is
		// dropped with it (an error batch is not applied).
		if *delivered != 0 && md.Sequence.Consumer != *delivered+1 {
			b.err = fmt.Errorf("%w: consumer sequence %d after %d (stream sequence %d)", errDeliveryGap, md.Sequence.Consumer, *delivered, md.Sequence.Stream)
			return b
		}
		*delivered = md.Sequence.Consumer
		m.add(&b, msg, md.Stream, md.Sequence.Stream, ckpt)
		if md.NumPending == 0 && b.last != nil {
			break // caught up: nothing to wait for
		}
	}
	return b
}

// add decodes one message of stream streamName into the batch, or records
// why it cannot be.
func (m *Materializer) add(b *batch, msg jetstream.Msg, streamName string, seq, ckpt uint64) {
	if seq <= ckpt || seq <= b.seq {
		return // redelivered, already applied
	}
	b.last, b.seq = msg, seq
	// Decode checks the payload's cluster against the subject's; the
	// stream is the third witness. A cluster's stream takes only its
	// subjects, but the stream configuration is the hub's to change and
	// an event applied under the wrong cluster is served as that cluster's.
	ev, err := stream.Decode(msg.Subject(), msg.Data())
	if err == nil {
		if c, ok := stream.ClusterFromStream(streamName); !ok || c != ev.GetCluster() {
			err = fmt.Errorf("%w: cluster %q in stream %s", errWrongCluster, ev.GetCluster(), streamName)
		}
	}
	if err != nil {
		b.bad = append(b.bad, badMsg{msg, err})
		return
	}
	if m.cfg.Filter != nil && stream.IsObjectEvent(ev) && !m.cfg.Filter(ev) {
		m.metrics.Skipped.Add(1)
		return
	}
	e := feed.Event{Seq: seq, Event: ev}
	if ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		// Here, in the fetching stage, so that it overlaps with applying.
		if e.Labels, e.Search, err = LabelsAndSearchText(ev.GetObject(), ev.GetCluster()); err != nil {
			b.bad = append(b.bad, badMsg{msg, &PoisonError{Seq: seq, Err: fmt.Errorf("object of %s/%s: %w", ev.GetNamespace(), ev.GetName(), err)}})
			return
		}
		e.Labeled = true
	}
	b.evs = append(b.evs, e)
	b.msgs = append(b.msgs, msg)
}
