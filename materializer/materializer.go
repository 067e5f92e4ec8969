package materializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// StreamDepth, when set, is the messages per object every cluster
	// stream it consumes keeps (stream.EnsureDepth, before its consumer
	// starts): the hub's depth with history on, so that an object's
	// changes do not replace one another on the stream before they are
	// applied, 1 without. 0 leaves the streams as they are (rebuild).
	StreamDepth int
	Logger      *slog.Logger
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
		var clusters []string
		for name := range names.Name() {
			if cluster, ok := stream.ClusterFromStream(name); ok && (len(only) == 0 || only[cluster]) {
				clusters = append(clusters, cluster)
			}
		}
		size := m.batchFor(len(clusters))
		for _, cluster := range clusters {
			mu.Lock()
			skip := running[cluster]
			running[cluster] = true
			mu.Unlock()
			if skip {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := m.consume(ctx, cluster, size)
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

// fleetInflight bounds the events all clusters' consumers hold in memory
// together (about 130 MB of 1.3 KB Pods), and minBatch is the smallest
// batch a large fleet's consumers apply.
const (
	fleetInflight = 100_000
	minBatch      = 16
)

// batchFor is the batch size of each cluster's consumer when the hub
// consumes clusters streams: BatchSize, or less in a large fleet. A
// consumer holds up to five batches (two prefetched by nats.go, one being
// filled, one queued and one being applied), so the events in flight stay
// near fleetInflight at any fleet size instead of growing with it: at
// 2,000 clusters of 500 Pods, full batches were room for every cluster's
// whole state at once during a sync, on top of the hub's own. A consumer
// keeps the size it started with; the fleet's next consumers take the
// size for the fleet they start in.
func (m *Materializer) batchFor(clusters int) int {
	return min(m.cfg.BatchSize, max(minBatch, fleetInflight/(5*max(clusters, 1))))
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
func (m *Materializer) consumer(ctx context.Context, cluster string, size int) (jetstream.Consumer, uint64, error) {
	ckpt, err := m.cfg.Sink.Checkpoint(ctx, cluster)
	if err != nil {
		return nil, 0, &sinkError{err}
	}
	sname := stream.StreamName(cluster)
	cfg := ConsumerConfig(m.cfg.Durable, size)
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

// ConsumerConfig is the durable consumer named durable the materializer
// keeps on a cluster stream, applying batches of size events, from the
// stream's start (a checkpoint moves the start). bench-natsfloor measures
// what the server holds for it.
func ConsumerConfig(durable string, size int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: durable,
		// A replica gone for good leaves its consumers behind; one that
		// comes back recreates its own from its checkpoint anyway.
		InactiveThreshold: 24 * time.Hour,
		// Its state needs no disk: the sink's checkpoint is the truth and
		// every start makes the consumer afresh from it. A file-backed
		// one cost each cluster a flush goroutine in the server and a
		// state file rewritten (written, synced, renamed) as acks moved,
		// a visible share of the hub's CPU while 1,000 clusters synced
		// (measured: docs/benchmarks/fleet.md#2000-clusters-x-500-pods-the-issues-scale-2026-12-04).
		MemoryStorage: true,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       5 * time.Minute,
		MaxAckPending: 100 * size,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// consume runs two stages per cluster: fetching and decoding the next batch
// (of at most size events) overlaps with applying the current one.
func (m *Materializer) consume(ctx context.Context, cluster string, size int) error {
	log := m.log.With("cluster", cluster)
	if m.cfg.StreamDepth > 0 {
		changed, err := stream.EnsureDepth(ctx, m.js, cluster, m.cfg.StreamDepth)
		if err != nil {
			return err
		}
		if changed {
			log.Info("stream keeps this many messages per object now", "depth", m.cfg.StreamDepth)
		}
	}
	cons, ckpt, err := m.consumer(ctx, cluster, size)
	if err != nil {
		return err
	}
	m.setApplied(cluster, ckpt)
	log.Info("consuming", "from", ckpt+1)
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * size))
	if err != nil {
		return err
	}
	defer it.Stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 1)
	go m.fetchAll(cctx, it, ckpt, size, batches)
	a := m.newApplier(cluster)
	defer func() { _ = a.finish() }()
	return a.run(ctx, batches)
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
