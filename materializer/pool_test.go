package materializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
)

// memSink keeps, per cluster, the checkpoint and every applied sequence,
// and fails the test on a sequence applied twice or out of order; order is
// the cluster of every batch applied, in the order applied.
type memSink struct {
	t       *testing.T
	mu      sync.Mutex
	ckpt    map[string]uint64
	applied map[string][]uint64
	order   []string
	sizes   []int // events of each batch
}

func newMemSink(t *testing.T) *memSink {
	return &memSink{t: t, ckpt: map[string]uint64{}, applied: map[string][]uint64{}}
}

func (s *memSink) Apply(_ context.Context, cluster string, evs []feed.Event, last uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		if e.Seq <= s.ckpt[cluster] {
			s.t.Errorf("cluster %s: seq %d applied at checkpoint %d", cluster, e.Seq, s.ckpt[cluster])
		}
		s.applied[cluster] = append(s.applied[cluster], e.Seq)
	}
	s.ckpt[cluster] = last
	s.order = append(s.order, cluster)
	s.sizes = append(s.sizes, len(evs))
	return nil
}

func (s *memSink) Checkpoint(_ context.Context, cluster string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ckpt[cluster], nil
}

// checkpoints is every cluster's checkpoint.
func (s *memSink) checkpoints() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]uint64{}
	for c, v := range s.ckpt {
		out[c] = v
	}
	return out
}

// poolFixture is an embedded NATS server with the dead-letter stream.
type poolFixture struct {
	t   *testing.T
	ctx context.Context
	js  jetstream.JetStream
	m   func(cfg Config) *Materializer
}

func newPoolFixture(t *testing.T) *poolFixture {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_, nc, js := natstest.Start(t, -1)
	return &poolFixture{t: t, ctx: ctx, js: js, m: func(cfg Config) *Materializer {
		cfg.Name, cfg.NATS, cfg.Logger = "t", nc, slog.New(slog.DiscardHandler)
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}
}

// stream creates cluster's stream, republishing as the hub makes it or
// not (as if every republish were lost).
func (f *poolFixture) stream(cluster string, republish bool) {
	cfg := stream.StreamConfig(cluster, 1, 0)
	if !republish {
		cfg.RePublish = nil
	}
	if _, err := f.js.CreateStream(f.ctx, cfg); err != nil {
		f.t.Fatal(err)
	}
}

// publish stores pods from..to-1 of cluster; it returns the stream's last
// sequence.
func (f *poolFixture) publish(cluster string, from, to int) uint64 {
	var last uint64
	for i := from; i < to; i++ {
		ev := benchdata.Event(cluster, i, 1)
		data, err := stream.Encode(ev)
		if err != nil {
			f.t.Fatal(err)
		}
		ack, err := f.js.Publish(f.ctx, stream.ObjectSubject(cluster, stream.GVR(ev.GetGvr()), ev.GetUid()), data)
		if err != nil {
			f.t.Fatal(err)
		}
		last = ack.Sequence
	}
	return last
}

// run runs m until the test ends; Run must end without error.
func (f *poolFixture) run(m *Materializer) (stop func()) {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("Run: %v", err)
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// waitApplied waits until sink's checkpoints are want, within d.
func waitApplied(t *testing.T, sink *memSink, want map[string]uint64, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := sink.checkpoints()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("after %s checkpoints %v, want %v", d, got, want)
		}
		time.Sleep(5 * time.Millisecond) // polling the sink's state, not waiting instead of a condition
	}
}

// Many cluster streams, more than twice the workers, each with more than
// a batch: every one is applied whole, in order, nothing twice; and a
// change to any one of them, once idle, is applied at once (its
// republish wakes it: the discovery round is an hour away).
func TestPoolServesMoreClustersThanWorkers(t *testing.T) {
	f := newPoolFixture(t)
	sink := newMemSink(t)
	want := map[string]uint64{}
	for i := range 9 {
		c := fmt.Sprintf("c%d", i)
		f.stream(c, true)
		want[c] = f.publish(c, 0, 25+i)
	}
	m := f.m(Config{Sink: sink, Workers: 2, BatchSize: 10, DiscoverInterval: time.Hour})
	f.run(m)
	waitApplied(t, sink, want, 30*time.Second)
	for c, seqs := range sink.applied {
		for i, s := range seqs {
			if s != uint64(i+1) {
				t.Fatalf("cluster %s applied %v, want 1..%d in order", c, seqs, want[c])
			}
		}
	}
	for _, c := range []string{"c3", "c7"} {
		want[c] = f.publish(c, 100, 101)
		if took := waitApplied(t, sink, want, 5*time.Second); took > time.Second {
			t.Fatalf("a change to idle %s took %s", c, took)
		}
	}
	if got := m.Applied(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Applied %v, want %v", got, want)
	}
}

// One worker, one stream with a large backlog listed first, and small
// streams: each small stream is applied within the big one's first two
// turns, not after its whole backlog.
func TestPoolIsFair(t *testing.T) {
	f := newPoolFixture(t)
	sink := newMemSink(t)
	want := map[string]uint64{}
	f.stream("a-big", true)
	want["a-big"] = f.publish("a-big", 0, 400)
	for _, c := range []string{"b1", "b2", "b3"} {
		f.stream(c, true)
		want[c] = f.publish(c, 0, 3)
	}
	f.run(f.m(Config{Sink: sink, Workers: 1, BatchSize: 10, DiscoverInterval: time.Hour}))
	waitApplied(t, sink, want, 30*time.Second)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	big := 0
	for _, c := range sink.order {
		if c == "a-big" {
			big++
			continue
		}
		if big > 2*turnBatches {
			t.Fatalf("%s applied after %d batches of the big stream (order %v)", c, big, sink.order)
		}
	}
	if big < 400/10 {
		t.Fatalf("%d batches of the big stream, want at least 40", big)
	}
}

// A stream whose republish never arrives (made without it, as if every
// one were lost) is still served: the discovery round sees it hold more
// than was pulled.
func TestPoolLostRepublishCaughtByDiscovery(t *testing.T) {
	f := newPoolFixture(t)
	sink := newMemSink(t)
	f.stream("quiet", false)
	want := map[string]uint64{"quiet": f.publish("quiet", 0, 5)}
	const round = 300 * time.Millisecond
	f.run(f.m(Config{Sink: sink, Workers: 1, DiscoverInterval: round}))
	waitApplied(t, sink, want, 10*time.Second)
	for i := range 3 {
		want["quiet"] = f.publish("quiet", 10+i, 11+i)
		if took := waitApplied(t, sink, want, 10*time.Second); took > 3*round {
			t.Fatalf("change %d applied after %s, want within a discovery round (%s)", i, took, round)
		}
	}
}

// A consumer deleted under the materializer (as JetStream deletes one
// nothing pulled from for its InactiveThreshold: a stream idle that long)
// is made again from the sink's checkpoint at the stream's next wake-up,
// not a discovery round later (the round is an hour away here), and a new
// materializer on the same sink resumes there too: nothing applied twice
// (memSink checks), nothing lost.
func TestPoolConsumerRestartResumesFromCheckpoint(t *testing.T) {
	f := newPoolFixture(t)
	sink := newMemSink(t)
	f.stream("c", true)
	sink.ckpt["c"] = f.publish("c", 0, 10) - 4 // as if the first six were applied before
	want := map[string]uint64{"c": f.publish("c", 10, 11)}
	m := f.m(Config{Sink: sink, Workers: 2, DiscoverInterval: time.Hour})
	stop := f.run(m)
	waitApplied(t, sink, want, 10*time.Second)
	if got := sink.applied["c"]; fmt.Sprint(got) != "[7 8 9 10 11]" {
		t.Fatalf("applied %v, want 7..11 (the checkpoint was 6)", got)
	}
	if err := f.js.DeleteConsumer(f.ctx, stream.StreamName("c"), "t"); err != nil {
		t.Fatal(err)
	}
	want["c"] = f.publish("c", 20, 25)
	waitApplied(t, sink, want, 10*time.Second)
	if n := m.Metrics().ConsumerErrors.Load(); n != 0 {
		t.Fatalf("%d consumer errors: the deleted consumer was not made again at once", n)
	}
	stop()
	want["c"] = f.publish("c", 30, 32)
	f.run(f.m(Config{Sink: sink, Workers: 1}))
	waitApplied(t, sink, want, 10*time.Second)
	if n := len(sink.applied["c"]); n != 5+5+2 {
		t.Fatalf("applied %v, want each of 7..%d once", sink.applied["c"], want["c"])
	}
}

// A pull is bounded in bytes as well as in messages: with MaxBatchBytes
// at its least, 1.2 MiB objects come at most three a batch (the fourth is
// left for the next pull), and every one is applied.
func TestPoolBatchesBoundedInBytes(t *testing.T) {
	f := newPoolFixture(t)
	sink := newMemSink(t)
	f.stream("c", true)
	big := strings.Repeat("x", 1200<<10)
	var last uint64
	for i := range 10 {
		ev := benchdata.Event("c", i, 1)
		ev.Object = []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + ev.GetName() + `","uid":"` + ev.GetUid() + `","annotations":{"big":"` + big + `"}}}`)
		data, err := stream.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := f.js.Publish(f.ctx, stream.ObjectSubject("c", stream.GVR(ev.GetGvr()), ev.GetUid()), data)
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	f.run(f.m(Config{Sink: sink, Workers: 1, MaxBatchBytes: MinBatchBytes, DiscoverInterval: time.Hour}))
	waitApplied(t, sink, map[string]uint64{"c": last}, 30*time.Second)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, n := range sink.sizes {
		if n > 3 {
			t.Fatalf("batches of %v events: more than 3 objects of 1.2 MiB in %d bytes", sink.sizes, MinBatchBytes)
		}
	}
	if len(sink.applied["c"]) != 10 {
		t.Fatalf("applied %v, want 10 events", sink.applied["c"])
	}
}

// A wake-up whose pull finds nothing although the stream is known to hold
// more (a JetStream cluster's consumer server storing the message after
// the stream's leader republished it) is pulled again, 1 ms, 2 ms, 4 ms
// later..., for at most FlushInterval; then what the stream was known to
// hold counts as pulled, and the stream is left for the republish and the
// discovery round.
func TestEmptyPullRetriedForAtMostFlushInterval(t *testing.T) {
	m := &Materializer{cfg: Config{Workers: 1, FlushInterval: 20 * time.Millisecond}}
	p := newPool(m)
	defer p.close()
	s := &session{cluster: "c", through: 5}
	p.sessions["c"] = s
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// retry serves the stream's wake-up until its retries end, and says
	// how many there were.
	retry := func(what string) int {
		t.Helper()
		retries := 0
		for {
			if got := p.take(ctx); got != s {
				t.Fatalf("%s: took %v, want the woken stream (after %d retries)", what, got, retries)
			}
			p.empty(s) // its pull found nothing
			p.release(s, false)
			p.mu.Lock()
			done := s.timer == nil || !s.queued && s.waited == 0
			p.mu.Unlock()
			if done {
				return retries
			}
			retries++
			// The next retry is the timer's: wait for it to queue the stream.
			for {
				p.mu.Lock()
				q := s.queued
				p.mu.Unlock()
				if q {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s: the retry never came", what)
				case <-time.After(time.Millisecond):
				}
			}
		}
	}
	through := func() uint64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return s.through
	}
	p.wakeUp("c", 9) // a republish of sequence 9
	if n := retry("the republish"); n < 3 || n > 8 {
		t.Fatalf("%d retries within 20 ms, want about log2(20)", n)
	}
	// Not given up yet: a consumer lagging its stream's leader (R3) may
	// hold it later; the discovery round wakes the stream again.
	if through() != 5 {
		t.Fatalf("pulled through %d after one wake-up's retries, want 5 still", through())
	}
	p.found("c", 9)
	retry("the discovery round")
	if through() != 9 {
		t.Fatalf("pulled through %d after the round's retries found nothing either, want 9", through())
	}
	p.mu.Lock()
	queued := s.queued
	p.mu.Unlock()
	if queued {
		t.Fatal("the stream is woken again after the retries ended")
	}
	p.wakeUp("c", 9) // the same sequence again: already counted
	p.mu.Lock()
	queued = s.queued
	p.mu.Unlock()
	if queued {
		t.Fatal("a republish at or below what was pulled wakes the stream")
	}
}

func TestNewRefusesBadPoolConfig(t *testing.T) {
	_, nc, _ := natstest.Start(t, -1)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative workers", Config{Workers: -1}, "Workers -1"},
		{"batch bytes below a message", Config{MaxBatchBytes: 1 << 20}, "MaxBatchBytes 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name, tc.cfg.NATS, tc.cfg.Sink = "t", nc, fakeSink{}
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want %v naming %q", err, ErrInvalidConfig, tc.want)
			}
		})
	}
}
