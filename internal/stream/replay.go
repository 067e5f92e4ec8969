package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// ResourceSubjects are the subjects of one resource in a cluster's stream:
// its objects' and its control events'. A replay of the resource reads
// both, so a removal is seen in order with the objects.
func ResourceSubjects(cluster string, gvr schema.GroupVersionResource) []string {
	return []string{ResourceFilter(cluster, gvr), ControlSubject(cluster, gvr)}
}

// replayBatch is the most messages one fetch of a replay asks for.
const replayBatch = 500

// replayFetchWait bounds one fetch. The replay asks for no more messages
// than its consumer said are pending, so a fetch waits this long only when
// messages went from the stream while it read (a purge).
const replayFetchWait = 10 * time.Second

// Replay reads cluster's stream back: the messages on subjects after
// sequence from through to, in stream order, calling fn with the sequence
// and event of each it can decode. Undecodable messages are passed over:
// the materializers dead-letter them. From 0 it delivers only the last
// message of each subject (DeliverLastPerSubject): the whole current
// state through to, and the tombstones of the deleted objects, however
// many messages per object the stream keeps (EnsureDepth). After a
// sequence it delivers every message the stream still holds in the
// range: with one message per subject the current state of every object
// changed in it, with more (the hub keeps history) each kept change too,
// in order, which a resumed watch passes on as the member made them.
//
// It reads with an ephemeral consumer, which says at once how many
// messages it will deliver: a fetch that comes back empty before the
// server has any ready cannot pass for the end (an empty state, or a gap
// in a watch). The replay ends when it has read them all or passed to;
// fewer messages delivered than pending is an error, as is a sequence
// out of order, an error of fn (returned as is), or the end of ctx. The
// consumer is deleted when the replay ends, cancelled or not. A stream
// that does not exist is jetstream.ErrStreamNotFound.
func Replay(ctx context.Context, js jetstream.JetStream, cluster string, subjects []string, from, to uint64, fn func(seq uint64, ev *fleetviewv1.ResourceEvent) error) error {
	if to <= from {
		return nil
	}
	name := StreamName(cluster)
	cfg := jetstream.ConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute, MemoryStorage: true}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := js.CreateConsumer(ctx, name, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Not the caller's ctx: the consumer of a cancelled replay still goes.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, name, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	var last uint64
	for received := uint64(0); received < pending; {
		batch, err := cons.Fetch(int(min(pending-received, replayBatch)), jetstream.FetchMaxWait(replayFetchWait))
		if err != nil {
			return err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if err := ctx.Err(); err != nil {
				return err
			}
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			if seq > to {
				return nil
			}
			if seq <= last {
				return fmt.Errorf("stream %s delivered seq %d after %d", name, seq, last)
			}
			last = seq
			if ev, err := Decode(msg.Subject(), msg.Data()); err == nil {
				if err := fn(seq, ev); err != nil {
					return err
				}
			}
			if seq == to {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if got == 0 {
			return fmt.Errorf("stream %s: %d of %d messages delivered", name, received, pending)
		}
		received += uint64(got)
	}
	return nil
}
