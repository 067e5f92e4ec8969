package collector

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The publish window's bounds and the acknowledgement latency it steers by.
const (
	// publishWindow is the most publishes that may await their
	// acknowledgement (nats.go's own limit, WithPublishAsyncMaxPending).
	publishWindow = 256
	// minPublishWindow keeps a collector from publishing one message per
	// round trip however busy the hub is.
	minPublishWindow = 2
	// pacerTarget is the acknowledgement latency the window aims under: far
	// below the ack timeout (30 s), and long enough that a hub answering
	// thousands of publishes a second keeps its streams busy.
	pacerTarget = time.Second
	// pacerPoll bounds a wait for a free slot should a completion go
	// unsignalled (nats.go drops a publish whose retry cannot be sent
	// without calling back; see awaitAcks).
	pacerPoll = 20 * time.Millisecond
)

// pacer keeps a collector's unacknowledged publishes near what the hub
// acknowledges within its target latency, between a floor and
// publishWindow, so that what the fleet has in flight follows the hub's
// throughput rather than the number of clusters.
//
// Why: a fixed window of 256 is one cluster's fair share only while the
// fleet is small. When a registry made 2,000 collectors list at once, they
// put 512k publishes into the hub together: queued in its streams' ingest
// queues (heap), each holding a response mapping in the hub's account, and
// nats-server walks every pending response of the account once per service
// export with responses pending (serviceExport.checkExpiredResponses,
// every 2 minutes), which became the largest share of the hub's CPU over
// that sync, against next to none at 3 clusters (measured:
// docs/benchmarks/fleet.md#the-fleets-unacknowledged-publishes-follow-the-hub-2026-12-05-evening). The last acknowledgements
// then came later than the ack timeout and clusters relisted.
//
// One publish at a time is the probe: its latency (publish to
// acknowledgement) is one sample per round trip (nextWindow: above the
// target the window shrinks in proportion; at half the target or less, and
// if the window was full since the last sample, it grows by half). A
// failed publish (a timeout) counts as a sample at twice the target. The
// window starts at the floor: a fleet starting together does not flood the
// hub before the first sample returns, and one collector alone reaches the
// ceiling within a dozen round trips of a few milliseconds.
type pacer struct {
	target   time.Duration
	min, max int
	// lost is how long a probe may go unanswered before another publish
	// replaces it: twice the ack timeout, by which nats.go has called back
	// unless it lost the publish (see pacerPoll).
	lost time.Duration
	// pending is the publishes nats.go holds unacknowledged
	// (PublishAsyncPending). Never called with mu held: nats.go calls the
	// error callback, and so done, with its own lock held.
	pending func() int

	mu    sync.Mutex
	limit int
	// full: the window was full since the last sample, so the sample
	// says something about a larger one.
	full bool
	// wake is closed by the next completion; nil when nobody waits.
	wake    chan struct{}
	probe   *nats.Msg
	probeAt time.Time
}

func newPacer(target time.Duration, lo, hi int, ackTimeout time.Duration, pending func() int) *pacer {
	return &pacer{target: target, min: lo, max: hi, lost: 2 * ackTimeout, limit: lo, pending: pending}
}

// acquire waits until msg may be published: fewer than the window's
// publishes are unacknowledged, or ctx ended.
func (p *pacer) acquire(ctx context.Context, msg *nats.Msg) error {
	for {
		n := p.pending()
		p.mu.Lock()
		if n < p.limit {
			if n+1 >= p.limit {
				p.full = true
			}
			if p.probe == nil || time.Since(p.probeAt) > p.lost {
				p.probe, p.probeAt = msg, time.Now()
			}
			p.mu.Unlock()
			return nil
		}
		p.full = true
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		wake := p.wake
		p.mu.Unlock()
		t := time.NewTimer(pacerPoll)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// abandon forgets msg, which acquire let through but was not published.
func (p *pacer) abandon(msg *nats.Msg) {
	p.mu.Lock()
	if p.probe == msg {
		p.probe = nil
	}
	p.mu.Unlock()
}

// done takes the completion of msg's publish: acknowledged, or failed
// (failed true). Called by nats.go's callbacks, sometimes under nats.go's
// publisher lock: it must not call back into nats.go.
func (p *pacer) done(msg *nats.Msg, failed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
	if p.probe == nil || msg != p.probe {
		return
	}
	p.probe = nil
	latency := time.Since(p.probeAt)
	if failed {
		latency = max(latency, 2*p.target)
	}
	p.limit = nextWindow(p.limit, latency, p.target, p.full, p.min, p.max)
	p.full = false
}

// window is the current limit; 0 for a collector without a pacer.
func (p *pacer) window() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit
}

// nextWindow is the limit after a latency sample, always within [lo, hi].
// Above the target it is scaled by target/latency: where the hub is the
// bottleneck the latency grows with the window, so that is the window that
// would have met the target, reached in one round trip however far over
// it was (a storm's first samples can take tens of seconds). At half the
// target or less it grows by half if the window was full since the last
// sample; in between it holds.
func nextWindow(limit int, latency, target time.Duration, full bool, lo, hi int) int {
	switch {
	case latency > target:
		limit = int(int64(limit) * int64(target) / int64(latency))
	case latency <= target/2 && full:
		limit += max(1, limit/2)
	}
	return min(hi, max(lo, limit))
}
