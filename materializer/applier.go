package materializer

import (
	"context"
	"fmt"

	"github.com/fleetview/fleetview/internal/feed"
)

// applier is the applying stage of one cluster stream: it prepares a batch
// while the one before is being committed, and settles each (acknowledges
// and publishes it) once it is durable.
type applier struct {
	m       *Materializer
	cluster string
	sink    PipelinedSink
	// priors tells the prior state the sink does not; nil without an
	// observer.
	priors   *feed.Tracker
	inflight *flight
}

func (m *Materializer) newApplier(cluster string) *applier {
	ps, ok := m.cfg.Sink.(PipelinedSink)
	if !ok {
		ps = applyNow{m.cfg.Sink}
	}
	return &applier{m: m, cluster: cluster, sink: ps, priors: m.tracker(cluster)}
}

// run applies the batches until they end or one fails.
func (a *applier) run(ctx context.Context, batches <-chan batch) error {
	for {
		var settled <-chan error
		if a.inflight != nil {
			settled = a.inflight.done
		}
		var b batch
		var ok bool
		select {
		case err := <-settled:
			// The stream may be idle: a watch must not wait for the next
			// batch to see this one.
			if err := a.settle(err); err != nil {
				return err
			}
			continue
		case b, ok = <-batches:
		}
		if !ok {
			return a.finish()
		}
		if b.err != nil {
			if err := a.finish(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			return b.err
		}
		if err := a.apply(ctx, b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// apply prepares b without its poison and starts its commit.
func (a *applier) apply(ctx context.Context, b batch) error {
	var p Prepared
	evs, err := a.m.dropPoison(ctx, b, func(evs []feed.Event) (err error) {
		p, err = a.sink.Prepare(ctx, a.cluster, evs, b.seq)
		return err
	})
	if err != nil {
		return err
	}
	return a.commit(b, evs, p)
}

// commit starts p's commit once the batch in flight is durable, and only
// then settles that one: the observer (the watch hub) runs while the sink
// writes, not between two writes. Watches do not mind the hub trailing the
// sink: they replay through the sink's checkpoint.
func (a *applier) commit(b batch, evs []feed.Event, p Prepared) error {
	prev := a.inflight
	if prev != nil {
		if err := <-prev.done; err != nil {
			a.inflight = nil
			p.Discard()
			return prev.failed(err)
		}
	}
	a.inflight = &flight{b: b, evs: evs, done: p.Commit()}
	if prev != nil {
		a.done(prev.b, prev.evs)
	}
	return nil
}

// settle takes the outcome of the batch in flight, then acknowledges and
// announces it.
func (a *applier) settle(err error) error {
	f := a.inflight
	a.inflight = nil
	if err != nil {
		return f.failed(err)
	}
	a.done(f.b, f.evs)
	return nil
}

// finish waits for the batch in flight, if any, and settles it.
func (a *applier) finish() error {
	if a.inflight == nil {
		return nil
	}
	return a.settle(<-a.inflight.done)
}

// done records a durable batch: metrics, the applied sequence, the
// observer, and the stream acknowledgement.
func (a *applier) done(b batch, evs []feed.Event) {
	m := a.m
	m.metrics.Applied.Add(uint64(len(evs)))
	m.metrics.Batches.Add(1)
	m.setApplied(a.cluster, b.seq)
	if m.cfg.Observer != nil {
		a.priors.Tell(evs)
		m.cfg.Observer(feed.Batch{Cluster: a.cluster, Events: evs, LastSeq: b.seq})
	}
	if err := b.last.Ack(); err != nil {
		// The checkpoint in the sink is the truth; a lost ack only causes
		// a redelivery that is skipped.
		m.log.Debug("ack failed", "cluster", a.cluster, "err", err)
	}
}

// flight is a batch whose commit is in flight.
type flight struct {
	b    batch
	evs  []feed.Event
	done <-chan error
}

func (f *flight) failed(err error) error {
	return &sinkError{fmt.Errorf("apply up to seq %d: %w", f.b.seq, err)}
}
