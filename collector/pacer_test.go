package collector

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

func TestNextWindow(t *testing.T) {
	const target = time.Second
	for _, tc := range []struct {
		name    string
		limit   int
		latency time.Duration
		full    bool
		want    int
	}{
		{"slow: in proportion", 100, 2 * time.Second, true, 50},
		{"slow, window not full: still less", 100, 4 * time.Second, false, 25},
		{"a storm: one step down", 256, 64 * time.Second, true, 4},
		{"slow at the floor stays there", 2, 30 * time.Second, true, 2},
		{"slow just above the floor: not under it", 3, 2 * time.Second, true, 2},
		{"just over the target", 100, 1100 * time.Millisecond, true, 90},
		{"fast and full: half more", 100, 10 * time.Millisecond, true, 150},
		{"fast but not full: unchanged", 100, 10 * time.Millisecond, false, 100},
		{"fast at the floor: grows by at least one", 2, 0, true, 3},
		{"fast near the ceiling: the ceiling", 200, time.Millisecond, true, 256},
		{"at the target: unchanged", 100, target, true, 100},
		{"between half and the target: unchanged", 100, 700 * time.Millisecond, true, 100},
		{"at half the target: grows", 10, target / 2, true, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextWindow(tc.limit, tc.latency, target, tc.full, minPublishWindow, publishWindow); got != tc.want {
				t.Errorf("nextWindow(%d, %v, full %v) = %d, want %d", tc.limit, tc.latency, tc.full, got, tc.want)
			}
		})
	}
}

// TestPacerFollowsTheHub publishes through a collector on a real NATS
// server twice: to a JetStream stream, which acknowledges within
// milliseconds, and to a responder that acknowledges one publish per
// 5 ms, a hub slower than the pacer's target allows for a large window.
// The window grows to its ceiling on the first and stays small on the
// second, and nats.go never holds more unacknowledged publishes than the
// window allowed when they were sent.
func TestPacerFollowsTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, nc, js := natstest.Start(t, 0)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FAST", Subjects: []string{"fast.>"}}); err != nil {
		t.Fatal(err)
	}
	// A slow hub: one acknowledgement per 5 ms, in order (nats.go runs a
	// subscription's handler on one goroutine).
	var seq atomic.Int64
	sub, err := nc.Subscribe("slow.>", func(m *nats.Msg) {
		time.Sleep(5 * time.Millisecond)
		_ = m.Respond(fmt.Appendf(nil, `{"stream":"SLOW","seq":%d}`, seq.Add(1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	publish := func(c *Collector, subject string, n int) (maxPending, maxLimit int) {
		t.Helper()
		for i := range n {
			before := c.pacer.window()
			if err := c.publish(ctx, nats.NewMsg(fmt.Sprintf("%s.%d", subject, i))); err != nil {
				t.Fatal(err)
			}
			maxPending = max(maxPending, c.js.PublishAsyncPending())
			maxLimit = max(maxLimit, before, c.pacer.window())
		}
		if err := c.awaitAcks(ctx); err != nil {
			t.Fatal(err)
		}
		return maxPending, maxLimit
	}

	fast, err := New(Config{Cluster: "c1", REST: &rest.Config{Host: "https://127.0.0.1:1"}, NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	if got := fast.pacer.window(); got != minPublishWindow {
		t.Errorf("a new collector's window is %d, want the floor %d", got, minPublishWindow)
	}
	publish(fast, "fast", 3000)
	if fast.pacer.window() != publishWindow {
		t.Errorf("after 3,000 publishes acknowledged within milliseconds the window is %d, want the ceiling %d", fast.pacer.window(), publishWindow)
	}

	// Equilibrium: a window of w waits w x 5 ms; a 50 ms target holds it
	// at 10 or less (it grows only while acknowledgements take 25 ms or less).
	slow, err := New(Config{Cluster: "c2", REST: &rest.Config{Host: "https://127.0.0.1:1"}, NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	slow.pacer = newPacer(50*time.Millisecond, minPublishWindow, publishWindow, 30*time.Second, slow.js.PublishAsyncPending)
	maxPending, maxLimit := publish(slow, "slow", 300)
	if maxLimit > 10 {
		t.Errorf("against a hub acknowledging one publish per 5 ms, the window reached %d, want at most 10 (50 ms of acknowledgements)", maxLimit)
	}
	if maxPending > maxLimit {
		t.Errorf("%d publishes were unacknowledged at once, more than the largest window %d", maxPending, maxLimit)
	}
	// A window too large for the hub (as after a quiet spell at the
	// ceiling) shrinks back.
	slow.pacer.mu.Lock()
	slow.pacer.limit = 64
	slow.pacer.mu.Unlock()
	publish(slow, "slow", 300)
	if got := slow.pacer.window(); got < minPublishWindow || got > 10 {
		t.Errorf("from 64, after 300 publishes acknowledged one per 5 ms the window is %d, want %d to 10", got, minPublishWindow)
	}
	if seq.Load() != 600 {
		t.Errorf("the slow hub acknowledged %d publishes, want 600", seq.Load())
	}
}

// TestPacerWaitEndsWithTheContext: a publisher waiting for a slot returns
// the context's error when it ends, not after the ack timeout.
func TestPacerWaitEndsWithTheContext(t *testing.T) {
	var pending atomic.Int64
	pending.Store(10)
	p := newPacer(time.Second, 4, 8, 30*time.Second, func() int { return int(pending.Load()) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.acquire(ctx, nats.NewMsg("x")); err != context.DeadlineExceeded {
		t.Fatalf("acquire with a full window = %v, want %v", err, context.DeadlineExceeded)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("acquire returned %v after its context ended", d)
	}
	// A completion wakes a waiter without the poll: free a slot and signal.
	done := make(chan error, 1)
	go func() { done <- p.acquire(context.Background(), nats.NewMsg("y")) }()
	for {
		p.mu.Lock()
		waiting := p.wake != nil
		p.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pending.Store(0)
	p.done(nats.NewMsg("an acknowledged publish"), false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
