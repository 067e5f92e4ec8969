package materializer

import (
	"context"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Event is one decoded stream message and its stream sequence.
type Event struct {
	Seq   uint64
	Event *fleetviewv1.ResourceEvent
	// Labels are the object's metadata.labels, extracted (and the object's
	// JSON checked) by the materializer while the previous batch is being
	// applied; valid when Labeled. Upserts from a materializer are always
	// labeled; sinks fall back to extracting them for events built elsewhere.
	Labels  map[string]string
	Labeled bool
	// Prior is set by the sink when it applies the event.
	Prior Prior
}

// Prior is the object an event replaced or deleted, as the sink found it
// when it applied the event. With it an observer (the watch hub) tells an
// added object from a modified one, and routes an event by the labels the
// object had, without keeping every object's labels itself: a sink that
// reads the previous state anyway (Badger's, to update its label index)
// tells it for free. The zero Prior means the sink does not say.
type Prior struct {
	Told bool
	// Exists: the cache held the object (by name) before the event.
	Exists bool
	// Labels are that object's labels, unless LabelsUnknown.
	Labels        map[string]string
	LabelsUnknown bool
}

// Sink is a backend the materializer writes to.
type Sink interface {
	// Apply applies events of one cluster stream, in order, and records the
	// last applied sequence as that stream's checkpoint atomically with them.
	// It may fill in each event's Prior (which observers then see).
	Apply(ctx context.Context, cluster string, events []Event, lastSeq uint64) error
	// Checkpoint is the last sequence of the cluster stream the sink holds.
	Checkpoint(ctx context.Context, cluster string) (uint64, error)
}

// PipelinedSink is a Sink that can build a batch while the previous one is
// still being written. The materializer prepares batch N+1, waits until N
// is durable, then commits N+1: building a batch (CPU) overlaps the store's
// write of the one before, and a batch is never committed after an earlier
// one failed.
type PipelinedSink interface {
	Sink
	// Prepare does what Apply does short of committing. It must see the
	// effects of the batch committed before it even while that commit is in
	// flight. A PoisonError names an event to drop, as from Apply.
	Prepare(ctx context.Context, cluster string, events []Event, lastSeq uint64) (Prepared, error)
}

// Prepared is a batch ready to commit.
type Prepared interface {
	// Commit starts the write and returns at once; the channel receives its
	// outcome.
	Commit() <-chan error
	// Discard drops a batch that will not be committed.
	Discard()
}

// Committed is a Prepared whose batch is already durable.
type Committed struct{}

// Commit implements Prepared.
func (Committed) Commit() <-chan error {
	c := make(chan error, 1)
	c <- nil
	return c
}

// Discard implements Prepared.
func (Committed) Discard() {}

// applyNow runs a Sink that cannot pipeline through the pipelined path: its
// batches are applied, and so committed, when prepared.
type applyNow struct{ Sink }

func (a applyNow) Prepare(ctx context.Context, cluster string, events []Event, lastSeq uint64) (Prepared, error) {
	if err := a.Apply(ctx, cluster, events, lastSeq); err != nil {
		return nil, err
	}
	return Committed{}, nil
}
