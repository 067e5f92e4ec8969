package materializer

import (
	"context"

	"github.com/fleetview/fleetview/internal/feed"
)

// Sink is a backend the materializer writes to.
type Sink interface {
	// Apply applies events of one cluster stream, in order, and records the
	// last applied sequence as that stream's checkpoint atomically with them.
	// It may fill in each event's Prior (which observers then see); the
	// materializer tracks it for a sink that does not.
	Apply(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) error
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
	Prepare(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) (Prepared, error)
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

func (a applyNow) Prepare(ctx context.Context, cluster string, events []feed.Event, lastSeq uint64) (Prepared, error) {
	if err := a.Apply(ctx, cluster, events, lastSeq); err != nil {
		return nil, err
	}
	return Committed{}, nil
}
