package materializer

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// batch is one pull of a cluster stream, decoded and checked, as the
// applying stage takes it.
type batch struct {
	evs  []feed.Event
	msgs []delivery // msgs[i] carried evs[i]
	bad  []badMsg   // undecodable messages, in stream order
	last delivery
	seq  uint64 // stream sequence of last
	// pending is how many messages the stream held for the consumer after
	// the last one pulled (its NumPending): more than 0, the cluster is
	// served again.
	pending uint64
	// through is the stream sequence of the last message pulled, applied
	// or not (0: none pulled).
	through uint64
	err     error // the pull failed or showed a lost delivery
}

type badMsg struct {
	msg    delivery
	reason error
}

// collect decodes the messages of one pull past ckpt into a batch.
// delivered is the consumer sequence of the last delivery, across pulls:
// every delivery, redeliveries too, takes the consumer's next sequence,
// so a jump means one was lost. The batch up to it is dropped with it (an
// error batch is not applied).
func (m *Materializer) collect(msgs []delivery, ckpt uint64, delivered *uint64) batch {
	var b batch
	for _, msg := range msgs {
		md, err := msg.Metadata()
		if err != nil {
			b.err = err
			return b
		}
		if *delivered != 0 && md.Sequence.Consumer != *delivered+1 {
			b.err = fmt.Errorf("%w: consumer sequence %d after %d (stream sequence %d)", errDeliveryGap, md.Sequence.Consumer, *delivered, md.Sequence.Stream)
			return b
		}
		*delivered = md.Sequence.Consumer
		b.pending, b.through = md.NumPending, md.Sequence.Stream
		m.add(&b, msg, md.Stream, md.Sequence.Stream, ckpt)
	}
	return b
}

// add decodes one message of stream streamName into the batch, or records
// why it cannot be.
func (m *Materializer) add(b *batch, msg delivery, streamName string, seq, ckpt uint64) {
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
	if m.cfg.Filter != nil && feed.IsObjectEvent(ev) && !m.cfg.Filter(ev) {
		m.metrics.Skipped.Add(1)
		return
	}
	e := feed.Event{Seq: seq, Event: ev}
	if ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		// Here, before Prepare, so that it overlaps with the commit of
		// the batch before.
		if e.Labels, e.Search, err = LabelsAndSearchText(ev.GetObject(), ev.GetCluster()); err != nil {
			b.bad = append(b.bad, badMsg{msg, &PoisonError{Seq: seq, Err: fmt.Errorf("object of %s/%s: %w", ev.GetNamespace(), ev.GetName(), err)}})
			return
		}
		e.Labeled = true
	}
	b.evs = append(b.evs, e)
	b.msgs = append(b.msgs, msg)
}
