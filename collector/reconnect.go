package collector

import (
	"context"
	"time"
)

// reconnectPoll is how often, while a resource waits for NATS to be
// reachable again, the connection's state is read.
const reconnectPoll = 250 * time.Millisecond

// awaitReconnect is publisher.awaitReconnect: while NATS is unreachable,
// s's relist waits for it (relistOnReconnect). It runs in nats.go's
// acknowledgement-timeout callback, under the JetStream publisher's lock:
// IsConnected takes only the connection's lock, which nats.go itself
// takes under that one when publishing, so the order is the same.
func (c *Collector) awaitReconnect(s *resourceSync) bool {
	if c.cfg.NATS == nil || c.cfg.NATS.IsConnected() {
		return false
	}
	s.relistOnReconnect.Store(true)
	c.awaiting.Store(true)
	return true
}

// relistOnReconnect asks every resource whose list's publishes timed out
// while NATS was unreachable to relist once it is reachable again (a
// watch's resume instead: resume.go): by then the
// reconnect buffer has been sent, in order, so the relist only repairs
// what was lost in flight when the server died. Only a flag is read while
// nothing waits, so the poll costs nothing per resource then.
func (c *Collector) relistOnReconnect(ctx context.Context) error {
	t := time.NewTicker(reconnectPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !c.awaiting.Load() || !c.cfg.NATS.IsConnected() {
			continue
		}
		c.awaiting.Store(false)
		c.mu.Lock()
		for _, r := range c.running {
			if r.rs.relistOnReconnect.Swap(false) {
				r.rs.requestRelist()
			}
		}
		c.mu.Unlock()
	}
}
