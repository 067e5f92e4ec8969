package materializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Config configures a materializer.
type Config struct {
	// Name is the durable consumer name on every cluster stream; two
	// materializers with different names each see every event.
	Name string
	// Durable is the consumer's name (default Name): one per replica of
	// a store, since two processes on one durable consumer split the
	// stream between them.
	Durable string
	NATS    *nats.Conn
	Sink    Sink
	// BatchSize is the most events handed to the sink at once (one Badger
	// transaction, one OpenSearch bulk). Default 1000.
	BatchSize int
	// FlushInterval is the longest a started batch waits to fill up before
	// it is applied anyway. Default 200ms.
	FlushInterval time.Duration
	// DiscoverInterval is how often new cluster streams are looked for.
	DiscoverInterval time.Duration
	// Filter, when set, selects the object events (upserts and deletes) this
	// materializer applies; the others are skipped, but the checkpoint still
	// moves past them. Control events (sync markers, resource removal)
	// always reach the sink, so a removal clears every backend.
	Filter func(ev *fleetviewv1.ResourceEvent) bool
	// Clusters, when set, limits consumption to these cluster streams.
	Clusters []string
	// Observer, when set, is told about every batch after it is committed
	// (the query API's watch fan-out), every object event with its prior
	// state: the sink's, or, for a sink that does not tell it, the
	// materializer's memory of the objects it applied since it started. It
	// must not block for long: the stream's consumption waits for it.
	Observer func(feed.Batch)
	// Replicas is the dead-letter stream's replica count (the hub's
	// --stream-replicas); 0 keeps an existing stream as it is and creates
	// a missing one with one replica, for processes that only read the
	// streams (rebuild). The durable consumers on the cluster streams
	// are left at 0 replicas, which JetStream takes as the stream's: a
	// consumer on an R3 stream survives the loss of a server as its
	// stream does.
	Replicas int
	Logger   *slog.Logger
}

// Materializer applies every cluster stream to one sink.
type Materializer struct {
	cfg     Config
	js      jetstream.JetStream
	log     *slog.Logger
	metrics Metrics

	mu      sync.Mutex
	applied map[string]uint64
	priors  map[string]*feed.Tracker // by cluster, see tracker
}

// New builds a materializer.
func New(cfg Config) (*Materializer, error) {
	if cfg.Name == "" || cfg.NATS == nil || cfg.Sink == nil {
		return nil, errors.New("materializer: Name, NATS and Sink are required")
	}
	if cfg.Durable == "" {
		cfg.Durable = cfg.Name
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.DiscoverInterval <= 0 {
		cfg.DiscoverInterval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(cfg.NATS)
	if err != nil {
		return nil, err
	}
	return &Materializer{cfg: cfg, js: js, log: cfg.Logger.With("materializer", cfg.Name), applied: map[string]uint64{}, priors: map[string]*feed.Tracker{}}, nil
}

// Applied is the last applied sequence per cluster stream.
func (m *Materializer) Applied() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]uint64, len(m.applied))
	for k, v := range m.applied {
		out[k] = v
	}
	return out
}

// Metrics are the materializer's counters.
func (m *Materializer) Metrics() *Metrics { return &m.metrics }

// EnsureDeadLetterStream creates the dead-letter stream, or updates it to
// replicas copies; with replicas 0 an existing stream is kept as it is
// (an update without a replica count would move it to one replica).
func EnsureDeadLetterStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		_, err := js.Stream(ctx, stream.DeadStream)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("dead-letter stream: %w", err)
		}
		replicas = 1
	}
	if _, err := js.CreateOrUpdateStream(ctx, stream.DeadStreamConfig(replicas)); err != nil {
		return stream.ReplicasError("dead-letter stream "+stream.DeadStream, replicas, err)
	}
	return nil
}

// Run consumes every cluster stream, starting a consumer for each stream as
// it appears, until ctx ends. A consumer that fails for a reason other than
// the sink (a deleted stream, a lost connection) is started again on the
// next discovery round; a sink failure ends Run.
func (m *Materializer) Run(ctx context.Context) error {
	if err := EnsureDeadLetterStream(ctx, m.js, m.cfg.Replicas); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	running := map[string]bool{}
	only := map[string]bool{}
	for _, c := range m.cfg.Clusters {
		only[c] = true
	}
	errs := make(chan error, 1)
	t := time.NewTicker(m.cfg.DiscoverInterval)
	defer t.Stop()
	for {
		names := m.js.StreamNames(ctx, jetstream.WithStreamListSubject(stream.AllObjects))
		for name := range names.Name() {
			cluster, ok := stream.ClusterFromStream(name)
			mu.Lock()
			skip := !ok || running[cluster] || (len(only) > 0 && !only[cluster])
			if !skip {
				running[cluster] = true
			}
			mu.Unlock()
			if skip {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := m.consume(ctx, cluster)
				mu.Lock()
				delete(running, cluster)
				mu.Unlock()
				if err == nil || ctx.Err() != nil {
					return
				}
				var se *sinkError
				if errors.As(err, &se) {
					m.metrics.SinkErrors.Add(1)
					select {
					case errs <- fmt.Errorf("cluster %s: %w", cluster, err):
					default:
					}
					return
				}
				m.metrics.ConsumerErrors.Add(1)
				m.log.Warn("consumer stopped; restarting it on the next discovery round", "cluster", cluster, "err", err)
			}()
		}
		if err := names.Err(); err != nil && ctx.Err() == nil {
			m.log.Warn("listing streams failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-t.C:
		}
	}
}

// sinkError marks a failure of the sink, which ends Run: retrying is the
// sink's own business (OpenSearch retries with backoff), so an error that
// reaches here is not transient.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// consumer creates the durable consumer afresh, right after the sink's
// checkpoint: the sink, not the consumer, is the truth about what was
// applied. Reusing a consumer would be wrong even when its ack floor equals
// the checkpoint: messages it delivered to the previous (killed) process
// stay unacknowledged until AckWait, and newer ones would be delivered, and
// applied, before them.
func (m *Materializer) consumer(ctx context.Context, cluster string) (jetstream.Consumer, uint64, error) {
	ckpt, err := m.cfg.Sink.Checkpoint(ctx, cluster)
	if err != nil {
		return nil, 0, &sinkError{err}
	}
	sname := stream.StreamName(cluster)
	cfg := jetstream.ConsumerConfig{
		Durable: m.cfg.Durable,
		// A replica gone for good leaves its consumers behind; one that
		// comes back recreates its own from its checkpoint anyway.
		InactiveThreshold: 24 * time.Hour,
		AckPolicy:         jetstream.AckAllPolicy,
		AckWait:           5 * time.Minute,
		MaxAckPending:     100 * m.cfg.BatchSize,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
	}
	if ckpt > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = ckpt + 1
	}
	if err := m.js.DeleteConsumer(ctx, sname, m.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, 0, err
	}
	c, err := m.js.CreateConsumer(ctx, sname, cfg)
	if err != nil {
		return nil, 0, err
	}
	return c, ckpt, nil
}

// batch is what the fetching stage hands the applying stage.
type batch struct {
	evs  []feed.Event
	msgs []jetstream.Msg // msgs[i] carried evs[i]
	bad  []badMsg        // undecodable messages, in stream order
	last jetstream.Msg
	seq  uint64 // stream sequence of last
	err  error  // the fetching stage stopped with this error
}

type badMsg struct {
	msg    jetstream.Msg
	reason error
}

// consume runs two stages per cluster: fetching and decoding the next batch
// overlaps with applying the current one.
func (m *Materializer) consume(ctx context.Context, cluster string) error {
	log := m.log.With("cluster", cluster)
	cons, ckpt, err := m.consumer(ctx, cluster)
	if err != nil {
		return err
	}
	m.setApplied(cluster, ckpt)
	log.Info("consuming", "from", ckpt+1)
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * m.cfg.BatchSize))
	if err != nil {
		return err
	}
	defer it.Stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 1)
	go m.fetchAll(cctx, it, ckpt, batches)
	a := m.newApplier(cluster)
	defer func() { _ = a.finish() }()
	return a.run(ctx, batches)
}

// fetchAll is the fetching stage: it hands on batches past ckpt until ctx
// ends or fetching fails (that batch carries the error), then closes
// batches.
func (m *Materializer) fetchAll(ctx context.Context, it jetstream.MessagesContext, ckpt uint64, batches chan<- batch) {
	defer close(batches)
	var delivered uint64 // the consumer sequence of the last delivery
	for ctx.Err() == nil {
		b := m.fetch(ctx, it, ckpt, &delivered)
		if b.last == nil && b.err == nil {
			continue
		}
		select {
		case batches <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
		ckpt = b.seq
	}
}

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

// fetch collects up to BatchSize messages. It flushes early when the stream
// has nothing more pending (so a watch sees a trickle of changes at once),
// and otherwise waits at most FlushInterval once the first one arrived (so
// bulk ingest fills its batches).
func (m *Materializer) fetch(ctx context.Context, it jetstream.MessagesContext, ckpt uint64, delivered *uint64) batch {
	var b batch
	bctx := ctx
	for len(b.evs)+len(b.bad) < m.cfg.BatchSize {
		msg, err := it.Next(jetstream.NextContext(bctx))
		if err != nil {
			if bctx.Err() != nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			b.err = err
			return b
		}
		if b.last == nil && b.err == nil && bctx == ctx {
			var cancel context.CancelFunc
			bctx, cancel = context.WithTimeout(ctx, m.cfg.FlushInterval)
			defer cancel()
		}
		md, err := msg.Metadata()
		if err != nil {
			b.err = err
			return b
		}
		// Every delivery, redeliveries too, takes the consumer's next
		// sequence: a jump means one was lost. The batch up to it is
		// dropped with it (an error batch is not applied).
		if *delivered != 0 && md.Sequence.Consumer != *delivered+1 {
			b.err = fmt.Errorf("%w: consumer sequence %d after %d (stream sequence %d)", errDeliveryGap, md.Sequence.Consumer, *delivered, md.Sequence.Stream)
			return b
		}
		*delivered = md.Sequence.Consumer
		m.add(&b, msg, md.Stream, md.Sequence.Stream, ckpt)
		if md.NumPending == 0 && b.last != nil {
			break // caught up: nothing to wait for
		}
	}
	return b
}

// add decodes one message of stream streamName into the batch, or records
// why it cannot be.
func (m *Materializer) add(b *batch, msg jetstream.Msg, streamName string, seq, ckpt uint64) {
	if seq <= ckpt || seq <= b.seq {
		return // redelivered, already applied
	}
	b.last, b.seq = msg, seq
	// Decode checks the payload's cluster against the subject's; the
	// stream is the third witness. A cluster's stream takes only its
	// subjects, but the stream configuration is the hub's to change and
	// an event applied under the wrong cluster is served as that cluster's.
	ev, err := stream.Decode(msg.Subject(), msg.Data())
	if err == nil {
		if c, ok := stream.ClusterFromStream(streamName); !ok || c != ev.GetCluster() {
			err = fmt.Errorf("%w: cluster %q in stream %s", errWrongCluster, ev.GetCluster(), streamName)
		}
	}
	if err != nil {
		b.bad = append(b.bad, badMsg{msg, err})
		return
	}
	if m.cfg.Filter != nil && feed.IsObjectEvent(ev) && !m.cfg.Filter(ev) {
		m.metrics.Skipped.Add(1)
		return
	}
	e := feed.Event{Seq: seq, Event: ev}
	if ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		// Here, in the fetching stage, so that it overlaps with applying.
		if e.Labels, e.Search, err = ObjectMeta(ev.GetObject(), ev.GetCluster()); err != nil {
			b.bad = append(b.bad, badMsg{msg, &PoisonError{Seq: seq, Err: fmt.Errorf("object of %s/%s: %w", ev.GetNamespace(), ev.GetName(), err)}})
			return
		}
		e.Labeled = true
	}
	b.evs = append(b.evs, e)
	b.msgs = append(b.msgs, msg)
}

// dropPoison dead-letters the undecodable messages, then hands the batch's
// events to apply; an event apply calls poison is dead-lettered and apply is
// called again without it. It returns the events applied.
func (m *Materializer) dropPoison(ctx context.Context, b batch, apply func([]feed.Event) error) ([]feed.Event, error) {
	for _, bad := range b.bad {
		if err := m.deadLetter(ctx, bad.msg, bad.reason); err != nil {
			return nil, err
		}
	}
	evs, msgs := b.evs, b.msgs
	for {
		err := apply(evs)
		var pe *PoisonError
		if errors.As(err, &pe) {
			i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq >= pe.Seq })
			if i == len(evs) || evs[i].Seq != pe.Seq {
				return nil, &sinkError{fmt.Errorf("sink reported poison seq %d not in the batch: %w", pe.Seq, err)}
			}
			if err := m.deadLetter(ctx, msgs[i], pe); err != nil {
				return nil, err
			}
			evs = append(evs[:i:i], evs[i+1:]...)
			msgs = append(msgs[:i:i], msgs[i+1:]...)
			continue
		}
		if err != nil {
			return nil, &sinkError{fmt.Errorf("apply up to seq %d: %w", b.seq, err)}
		}
		return evs, nil
	}
}

func (m *Materializer) setApplied(cluster string, seq uint64) {
	m.mu.Lock()
	m.applied[cluster] = seq
	m.mu.Unlock()
}

// tracker is the prior-state tracker of a cluster stream, kept across
// restarts of its consumer so that they do not make every object new
// again; nil without an observer, the only reader of prior states. It
// stays empty for a sink that tells them itself (Badger's).
func (m *Materializer) tracker(cluster string) *feed.Tracker {
	if m.cfg.Observer == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.priors[cluster]
	if t == nil {
		t = feed.NewTracker()
		m.priors[cluster] = t
	}
	return t
}

// deadLetter keeps a poison message with its reason and moves on.
func (m *Materializer) deadLetter(ctx context.Context, msg jetstream.Msg, reason error) error {
	md, _ := msg.Metadata()
	dl := nats.NewMsg(stream.DeadSubject(m.cfg.Name))
	dl.Data = msg.Data()
	dl.Header.Set(stream.HdrDeadReason, reason.Error())
	dl.Header.Set(stream.HdrDeadSubject, msg.Subject())
	if md != nil {
		dl.Header.Set(stream.HdrDeadStream, md.Stream)
		dl.Header.Set(stream.HdrDeadSeq, fmt.Sprint(md.Sequence.Stream))
		// Hubs sharing a NATS cluster each meet the same poison message:
		// within the duplicate window it is kept once per materializer
		// name, not once per hub.
		dl.Header.Set(nats.MsgIdHdr, m.cfg.Name+"/"+md.Stream+"/"+fmt.Sprint(md.Sequence.Stream))
	}
	// A collector may publish a poison message up to the largest size the
	// stream takes; with the headers above it would not fit, its dead
	// letter would be refused, and its cluster's ingest would stop there.
	// The dead letter keeps what fits and says how long the payload was.
	if limit := deadLetterRoom(m.cfg.NATS.MaxPayload(), dl.Header); len(dl.Data) > limit {
		dl.Header.Set(stream.HdrDeadTruncated, fmt.Sprint(len(dl.Data)))
		dl.Data = dl.Data[:max(0, limit-64)] // and room for that header
	}
	if _, err := m.js.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("dead-letter %s: %w", msg.Subject(), err)
	}
	m.metrics.DeadLettered.Add(1)
	m.log.Warn("poison event dead-lettered", "subject", msg.Subject(), "reason", reason)
	return nil
}

// deadLetterRoom is how many payload bytes a dead letter with headers h
// can carry: the smaller of the connection's and the dead-letter stream's
// message limits, less the headers' encoding.
func deadLetterRoom(connMax int64, h nats.Header) int {
	room := int64(stream.MaxPayload)
	if connMax > 0 && connMax < room {
		room = connMax
	}
	n := int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4) // "k: v\r\n"
		}
	}
	return int(room - n)
}
