package materializer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
)

// turnBatches is the most batches a worker applies from one cluster stream
// before it lets the stream go to the back of the ready queue: enough to
// overlap pulling and preparing a batch with the commit of the one before,
// few enough that a stream with a large backlog does not keep the others
// waiting (they are served round robin, a turn each).
const turnBatches = 4

// pool serves every cluster stream of a materializer with Workers
// goroutines, whatever the number of streams: a stream with messages for
// its consumer is ready, and a worker takes the ready stream that has
// waited longest, pulls and applies up to turnBatches batches, and puts it
// back if more is pending. A stream is served by one worker at a time, so
// its batches stay in order. In memory at once: per worker, one batch
// being prepared and one being committed, each at most BatchSize messages
// and MaxBatchBytes bytes.
//
// A stream becomes ready when its consumer is (re)created (it catches up
// from the sink's checkpoint), when it republishes a stored message's
// headers (stream.Appended: one subscription for every stream, no pull per
// stream and event), and when the discovery round finds it holding more
// than was pulled from it.
type pool struct {
	m    *Materializer
	only map[string]bool // Config.Clusters; empty: every cluster

	mu       sync.Mutex
	sessions map[string]*session
	queue    []*session // ready, the one that has waited longest first
	wake     chan struct{}
}

// session is one cluster stream being consumed.
type session struct {
	cluster string

	// The scheduler's, under pool.mu.
	queued bool // in the ready queue
	busy   bool // a worker serves it
	again  bool // became ready while busy: back in the queue when let go
	// through is the last stream sequence pulled (first: the sink's
	// checkpoint), want the highest the stream is known to hold (from a
	// republish or the discovery round).
	through, want uint64
	// waited is how long empty pulls were retried since want went past
	// through (the consumer's server may store a message a moment after
	// the stream's leader republished it); timer is the next retry.
	waited time.Duration
	timer  *time.Timer
	// patient: the retries of one wake-up found nothing; the next
	// discovery round's must find nothing too before want counts as
	// pulled.
	patient bool

	// The serving worker's.
	a         *applier // nil until the consumer is created
	floor     uint64   // the last stream sequence applied
	delivered uint64   // the consumer sequence of the last delivery
}

func newPool(m *Materializer) *pool {
	only := map[string]bool{}
	for _, c := range m.cfg.Clusters {
		only[c] = true
	}
	return &pool{m: m, only: only, sessions: map[string]*session{}, wake: make(chan struct{}, m.cfg.Workers)}
}

// enqueueLocked makes s ready.
func (p *pool) enqueueLocked(s *session) {
	switch {
	case s.busy:
		s.again = true
	case !s.queued:
		s.queued = true
		p.queue = append(p.queue, s)
		select {
		case p.wake <- struct{}{}:
		default: // every worker has a wake-up coming already
		}
	}
}

// take waits for a ready stream; nil when ctx ends.
func (p *pool) take(ctx context.Context) *session {
	for ctx.Err() == nil {
		p.mu.Lock()
		if len(p.queue) > 0 {
			s := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			s.queued, s.busy, s.again = false, true, false
			p.mu.Unlock()
			return s
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-ctx.Done():
		}
	}
	return nil
}

// release lets s go, to the back of the queue if more is pending.
func (p *pool) release(s *session, more bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.busy = false
	if more || s.again {
		s.again = false
		p.enqueueLocked(s)
	}
}

// drop forgets s, whose consumer failed: the next discovery round makes
// it afresh.
func (p *pool) drop(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[s.cluster] == s {
		delete(p.sessions, s.cluster)
	}
	s.busy = false
	if s.timer != nil {
		s.timer.Stop()
	}
}

// close stops the retries of empty pulls.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sessions {
		if s.timer != nil {
			s.timer.Stop()
		}
	}
}

// wakeUp marks cluster's stream ready: it holds seq (0: unknown).
func (p *pool) wakeUp(cluster string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[cluster]
	if s == nil {
		return // not consumed (yet): the discovery round will start it ready
	}
	s.want = max(s.want, seq)
	if seq == 0 || seq > s.through {
		p.enqueueLocked(s)
	}
}

// appended handles a stream's republished headers (stream.Appended). It
// runs on the subscription's goroutine, for every message any cluster
// stores, so it only marks the stream ready.
func (p *pool) appended(msg *nats.Msg) {
	cluster, ok := stream.ClusterFromAppended(msg.Subject)
	if !ok {
		return
	}
	seq, err := strconv.ParseUint(msg.Header.Get(stream.RePublishSequence), 10, 64)
	if err != nil || seq == 0 {
		return
	}
	p.wakeUp(cluster, seq)
}

// found is the discovery round's word on a cluster stream holding last:
// a new one is consumed (ready at once, to catch up from the checkpoint),
// one holding more than was pulled from it is ready. This is what a lost
// republish (a slow subscription dropping messages, a reconnect, a leader
// change between storing and republishing) costs: at most one
// DiscoverInterval.
func (p *pool) found(cluster string, last uint64) {
	if len(p.only) > 0 && !p.only[cluster] {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[cluster]
	if s == nil {
		s = &session{cluster: cluster}
		p.sessions[cluster] = s
		p.enqueueLocked(s)
		return
	}
	if last > s.through {
		s.want = max(s.want, last)
		p.enqueueLocked(s)
	}
}

// start makes s's durable consumer afresh at the sink's checkpoint.
func (p *pool) start(ctx context.Context, s *session) error {
	m := p.m
	ckpt, err := m.consumer(ctx, s.cluster)
	if err != nil {
		return err
	}
	s.a, s.floor, s.delivered = m.newApplier(s.cluster), ckpt, 0
	p.pulled(s, ckpt)
	m.setApplied(s.cluster, ckpt)
	m.log.Info("consuming", "cluster", s.cluster, "from", ckpt+1)
	return nil
}

// pulled records that s's stream was pulled through seq.
func (p *pool) pulled(s *session, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.through = max(s.through, seq)
	s.waited, s.patient = 0, false
}

// empty handles a pull that found nothing although the stream is known to
// hold more: it is pulled again, after 1 ms, 2 ms, 4 ms..., for at most
// FlushInterval in all, since in a JetStream cluster the consumer's server
// may store a message a moment after the stream's leader republished it.
// After that the stream waits for the next discovery round, whose wake-up
// is retried the same way; only if that finds nothing either does what the
// stream was known to hold count as pulled (a message that expired or was
// purged before its pull), so the rounds stop waking it. Counting it
// pulled after the first FlushInterval stranded a busy R3 stream whose
// consumer lagged its leader by more: nothing woke it again, and the
// collector benchmark's three-hub phase never finished.
func (p *pool) empty(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.want <= s.through {
		return
	}
	if s.waited >= p.m.cfg.FlushInterval {
		if s.patient {
			s.through = s.want
		}
		s.waited, s.patient = 0, !s.patient
		return
	}
	d := max(time.Millisecond, s.waited)
	s.waited += d
	if s.timer != nil {
		s.timer.Stop()
	}
	cluster := s.cluster
	s.timer = time.AfterFunc(d, func() { p.wakeUp(cluster, 0) })
}

// discover lists the cluster streams every DiscoverInterval until ctx
// ends.
func (p *pool) discover(ctx context.Context) error {
	t := time.NewTicker(p.m.cfg.DiscoverInterval)
	defer t.Stop()
	for {
		streams := p.m.js.ListStreams(ctx, jetstream.WithStreamListSubject(stream.AllObjects))
		for info := range streams.Info() {
			if cluster, ok := stream.ClusterFromStream(info.Config.Name); ok {
				p.found(cluster, info.State.LastSeq)
			}
		}
		if err := streams.Err(); err != nil && ctx.Err() == nil {
			p.m.log.Warn("listing streams failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// work serves ready streams until ctx ends or the sink fails. A stream
// whose consumer fails otherwise (a deleted stream, a lost connection, a
// lost delivery) is dropped, and made afresh by the next discovery round.
func (p *pool) work(ctx context.Context) error {
	m := p.m
	for {
		s := p.take(ctx)
		if s == nil {
			return nil
		}
		more, err := p.serve(ctx, s)
		if err == nil {
			p.release(s, more)
			continue
		}
		p.drop(s)
		if ctx.Err() != nil {
			return nil
		}
		var se *sinkError
		if errors.As(err, &se) {
			m.metrics.SinkErrors.Add(1)
			return fmt.Errorf("cluster %s: %w", s.cluster, err)
		}
		m.metrics.ConsumerErrors.Add(1)
		m.log.Warn("consumer stopped; restarting it on the next discovery round", "cluster", s.cluster, "err", err)
	}
}

// serve gives s one turn: its consumer made if it is new, then up to
// turnBatches pulls applied, each one's decoding and preparing overlapping
// the commit of the one before. Every commit is settled (acknowledged and
// observed) before the turn ends, so a stream waiting in the queue has
// nothing in flight and a watch never waits for another stream's turn.
// more is whether the stream holds more for its consumer.
func (p *pool) serve(ctx context.Context, s *session) (more bool, err error) {
	m := p.m
	if s.a == nil {
		if err := p.start(ctx, s); err != nil {
			return false, err
		}
	}
	defer func() {
		if ferr := s.a.finish(); err == nil {
			err = ferr
		}
	}()
	for i := range turnBatches {
		msgs, err := m.pull(ctx, s.cluster, m.cfg.BatchSize, m.cfg.MaxBatchBytes)
		if i == 0 && errors.Is(err, nats.ErrNoResponders) {
			// No consumer answers: JetStream deletes one nothing pulled
			// from for its InactiveThreshold, a stream idle that long.
			// Made again from the checkpoint at once (nothing is in
			// flight at a turn's start), not a round later; a stream
			// that is gone fails again and is dropped.
			m.log.Info("consumer gone; making it again", "cluster", s.cluster)
			if err := p.start(ctx, s); err != nil {
				return false, err
			}
			msgs, err = m.pull(ctx, s.cluster, m.cfg.BatchSize, m.cfg.MaxBatchBytes)
		}
		if err != nil {
			return false, err
		}
		b := m.collect(msgs, s.floor, &s.delivered)
		if b.err != nil {
			return false, b.err
		}
		if b.through == 0 {
			p.empty(s)
			return false, nil
		}
		p.pulled(s, b.through)
		if b.last != nil {
			if err := s.a.apply(ctx, b); err != nil {
				return false, err
			}
			s.floor = b.seq
		}
		if b.pending == 0 {
			return false, nil
		}
	}
	return true, nil
}
