package materializer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// seqMsg is a delivered stream message with its stream and consumer
// sequences.
type seqMsg struct {
	jetstream.Msg
	subject    string
	data       []byte
	sseq, cseq uint64
}

func (m seqMsg) Subject() string { return m.subject }
func (m seqMsg) Data() []byte    { return m.data }
func (m seqMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: stream.StreamName("c1"), NumPending: 1,
		Sequence: jetstream.SequencePair{Stream: m.sseq, Consumer: m.cseq}}, nil
}

// deliveries hands out its messages, then times out as an idle pull does.
type deliveries struct {
	jetstream.MessagesContext
	msgs []jetstream.Msg
}

func (d *deliveries) Next(...jetstream.NextOpt) (jetstream.Msg, error) {
	if len(d.msgs) == 0 {
		return nil, nats.ErrTimeout
	}
	m := d.msgs[0]
	d.msgs = d.msgs[1:]
	return m, nil
}

// TestFetchStopsAtADeliveryGap: consecutive consumer sequences make a
// batch, across fetches too; a jump (a delivery lost in flight, which
// AckAll of a later one would acknowledge) ends the batch with
// errDeliveryGap, so the consumer is made afresh from the checkpoint, and
// the message after the gap is not in it.
func TestFetchStopsAtADeliveryGap(t *testing.T) {
	msg := func(i int, cseq uint64) jetstream.Msg {
		ev := benchdata.Event("c1", i, 1)
		data, err := stream.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return seqMsg{subject: stream.ObjectSubject("c1", stream.GVR(ev.GetGvr()), ev.GetUid()), data: data, sseq: uint64(10 + 2*i), cseq: cseq}
	}
	m := &Materializer{cfg: Config{BatchSize: 100, FlushInterval: 50 * time.Millisecond}}
	for _, tc := range []struct {
		name      string
		cseqs     []uint64
		delivered uint64 // before the fetch
		events    int
		gap       bool
	}{
		{"contiguous", []uint64{1, 2, 3, 4}, 0, 4, false},
		{"contiguous after an earlier batch", []uint64{6, 7}, 5, 2, false},
		{"a delivery missing", []uint64{1, 2, 4, 5}, 0, 2, true},
		{"missing before the first of this batch", []uint64{7, 8}, 5, 0, true},
		{"a delivery again", []uint64{1, 2, 2}, 0, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deliveries{}
			for i, c := range tc.cseqs {
				d.msgs = append(d.msgs, msg(i, c))
			}
			delivered := tc.delivered
			b := m.fetch(context.Background(), d, 0, m.cfg.BatchSize, &delivered)
			if got := errors.Is(b.err, errDeliveryGap); got != tc.gap {
				t.Fatalf("batch error %v, want a delivery gap: %v", b.err, tc.gap)
			}
			if len(b.evs) != tc.events {
				t.Fatalf("%d events in the batch, want %d", len(b.evs), tc.events)
			}
			if !tc.gap && delivered != tc.cseqs[len(tc.cseqs)-1] {
				t.Fatalf("delivered %d after the batch, want %d", delivered, tc.cseqs[len(tc.cseqs)-1])
			}
		})
	}
}

// TestBatchForBoundsTheFleetsInflight: a small fleet's consumers take
// full batches; a large fleet's take smaller ones, so that all of them
// together hold about fleetInflight events, never less than minBatch.
func TestBatchForBoundsTheFleetsInflight(t *testing.T) {
	m := &Materializer{cfg: Config{BatchSize: 1000}}
	for _, tc := range []struct{ clusters, want int }{
		{0, 1000}, {1, 1000}, {3, 1000}, {20, 1000},
		{32, 625}, {300, 66}, {1000, 20}, {2000, 16}, {100_000, 16},
	} {
		got := m.batchFor(tc.clusters)
		if got != tc.want {
			t.Errorf("batchFor(%d) = %d, want %d", tc.clusters, got, tc.want)
		}
		if tc.clusters > 0 && got > minBatch && 5*got*tc.clusters > fleetInflight {
			t.Errorf("batchFor(%d) = %d holds %d events in flight, over %d", tc.clusters, got, 5*got*tc.clusters, fleetInflight)
		}
	}
}
