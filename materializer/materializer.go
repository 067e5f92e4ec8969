package materializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
	// MaxBatchBytes bounds the bytes of one pull, and so of a batch
	// (default 8 MiB; at least MinBatchBytes, so that the largest message
	// fits).
	MaxBatchBytes int
	// Workers is how many cluster streams are served at once, whatever
	// their number (default 4: on 2 cores, two decode and prepare while
	// two wait for NATS or a commit).
	Workers int
	// FlushInterval bounds how long a stream woken by its republish is
	// pulled again while its consumer does not show the message yet (in a
	// JetStream cluster the consumer's server may store it a moment after
	// the stream's leader republished it); the discovery round takes over
	// after that. Default 200ms. A pull never waits for messages to come:
	// it takes what the stream holds.
	FlushInterval time.Duration
	// DiscoverInterval is how often the cluster streams are listed: new
	// ones are consumed, and one holding more than was pulled from it (its
	// republish was lost) is served. Default 2s.
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

// MinBatchBytes is the least Config.MaxBatchBytes: the largest message a
// stream takes with room for its subject, reply and headers. A pull whose
// next message does not fit its bytes would never make progress.
const MinBatchBytes = stream.MaxPayload + 64<<10

// New builds a materializer.
func New(cfg Config) (*Materializer, error) {
	var errs []error
	if cfg.Name == "" || cfg.NATS == nil || cfg.Sink == nil {
		errs = append(errs, errors.New("Name, NATS and Sink are required"))
	}
	if cfg.Workers < 0 {
		errs = append(errs, fmt.Errorf("Workers %d is negative", cfg.Workers))
	}
	if cfg.MaxBatchBytes != 0 && cfg.MaxBatchBytes < MinBatchBytes {
		errs = append(errs, fmt.Errorf("MaxBatchBytes %d is less than %d, the largest message with its headers", cfg.MaxBatchBytes, MinBatchBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Durable == "" {
		cfg.Durable = cfg.Name
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = 8 << 20
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

// Run consumes every cluster stream with Workers goroutines (pool.go),
// consuming each stream as the discovery round finds it, until ctx ends.
// A consumer that fails for a reason other than the sink (a deleted
// stream, a lost connection) is made again on the next discovery round; a
// sink failure ends Run.
func (m *Materializer) Run(ctx context.Context) error {
	if err := EnsureDeadLetterStream(ctx, m.js, m.cfg.Replicas); err != nil {
		return err
	}
	p := newPool(m)
	defer p.close()
	// Before the first discovery round, so that a message stored between
	// a stream's listing and this subscription is not left for the next.
	sub, err := m.cfg.NATS.Subscribe(stream.AllAppended, p.appended)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", stream.AllAppended, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	g, gctx := errgroup.WithContext(ctx)
	for range m.cfg.Workers {
		g.Go(func() error { return p.work(gctx) })
	}
	g.Go(func() error { return p.discover(gctx) })
	return g.Wait()
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
func (m *Materializer) consumer(ctx context.Context, cluster string) (uint64, error) {
	ckpt, err := m.cfg.Sink.Checkpoint(ctx, cluster)
	if err != nil {
		return 0, &sinkError{err}
	}
	sname := stream.StreamName(cluster)
	cfg := jetstream.ConsumerConfig{
		Durable: m.cfg.Durable,
		// A replica gone for good leaves its consumers behind; one that
		// comes back recreates its own from its checkpoint anyway. An
		// idle stream's consumer, which nothing pulls from, goes too, and
		// is made again at the stream's next pull (pool.serve).
		InactiveThreshold: 24 * time.Hour,
		// Its state needs no disk: the sink's checkpoint is the truth and
		// every start makes the consumer afresh from it. A file-backed
		// one cost each cluster a flush goroutine in the server and a
		// state file rewritten (written, synced, renamed) as acks moved:
		// 6% of the hub's CPU while 1,000 clusters synced.
		MemoryStorage: true,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       5 * time.Minute,
		MaxAckPending: 100 * m.cfg.BatchSize,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if ckpt > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = ckpt + 1
	}
	if err := m.js.DeleteConsumer(ctx, sname, m.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, err
	}
	if _, err := m.js.CreateConsumer(ctx, sname, cfg); err != nil {
		return 0, err
	}
	return ckpt, nil
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
