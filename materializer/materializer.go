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

	"github.com/fleetview/fleetview/internal/stream"
)

const (
	deadStream  = "FV_DEAD"
	deadSubject = stream.SubjectRoot + ".dead"
)

// Config configures a materializer.
type Config struct {
	// Name is the durable consumer name on every cluster stream; two
	// materializers with different names each see every event.
	Name      string
	NATS      *nats.Conn
	Sink      Sink
	BatchSize int
	// DiscoverInterval is how often new cluster streams are looked for.
	DiscoverInterval time.Duration
	// Observer, when set, is told about every batch after it is committed
	// (the query API's watch fan-out). It must not block for long: the
	// stream's consumption waits for it.
	Observer func(cluster string, events []Event, lastSeq uint64)
	Logger           *slog.Logger
}

// Materializer applies every cluster stream to one sink.
type Materializer struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger

	mu      sync.Mutex
	applied map[string]uint64
}

// New builds a materializer.
func New(cfg Config) (*Materializer, error) {
	if cfg.Name == "" || cfg.NATS == nil || cfg.Sink == nil {
		return nil, errors.New("materializer: Name, NATS and Sink are required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
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
	return &Materializer{cfg: cfg, js: js, log: cfg.Logger.With("materializer", cfg.Name), applied: map[string]uint64{}}, nil
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

// Run consumes every cluster stream, starting a consumer for each stream as
// it appears, until ctx ends.
func (m *Materializer) Run(ctx context.Context) error {
	if _, err := m.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: deadStream, Subjects: []string{deadSubject + ".>"}, Storage: jetstream.FileStorage,
		MaxAge: 7 * 24 * time.Hour, MaxMsgSize: stream.MaxPayload,
	}); err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	started := map[string]bool{}
	errs := make(chan error, 1)
	t := time.NewTicker(m.cfg.DiscoverInterval)
	defer t.Stop()
	for {
		names := m.js.StreamNames(ctx, jetstream.WithStreamListSubject(stream.SubjectRoot+".obj.>"))
		for name := range names.Name() {
			cluster, ok := stream.ClusterFromStream(name)
			if !ok || started[cluster] {
				continue
			}
			started[cluster] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.consume(ctx, cluster); err != nil && ctx.Err() == nil {
					select {
					case errs <- fmt.Errorf("cluster %s: %w", cluster, err):
					default:
					}
				}
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

// consumer positions the durable consumer right after the sink's
// checkpoint. A consumer ahead of or behind the checkpoint (a fresh or
// rebuilt store) is recreated, because the sink, not the consumer, is the
// truth about what was applied.
func (m *Materializer) consumer(ctx context.Context, cluster string) (jetstream.Consumer, uint64, error) {
	ckpt, err := m.cfg.Sink.Checkpoint(ctx, cluster)
	if err != nil {
		return nil, 0, err
	}
	sname := stream.StreamName(cluster)
	cfg := jetstream.ConsumerConfig{
		Durable:       m.cfg.Name,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 100 * m.cfg.BatchSize,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if ckpt > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = ckpt + 1
	}
	if c, err := m.js.Consumer(ctx, sname, m.cfg.Name); err == nil {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, 0, err
		}
		if info.AckFloor.Stream == ckpt {
			return c, ckpt, nil
		}
		m.log.Info("repositioning consumer to the store checkpoint", "cluster", cluster, "consumerAckFloor", info.AckFloor.Stream, "checkpoint", ckpt)
		if err := m.js.DeleteConsumer(ctx, sname, m.cfg.Name); err != nil {
			return nil, 0, err
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, 0, err
	}
	c, err := m.js.CreateConsumer(ctx, sname, cfg)
	if err != nil {
		return nil, 0, err
	}
	return c, ckpt, nil
}

func (m *Materializer) consume(ctx context.Context, cluster string) error {
	log := m.log.With("cluster", cluster)
	cons, ckpt, err := m.consumer(ctx, cluster)
	if err != nil {
		return err
	}
	m.setApplied(cluster, ckpt)
	log.Info("consuming", "from", ckpt+1)
	for ctx.Err() == nil {
		batch, err := cons.Fetch(m.cfg.BatchSize, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
			log.Warn("fetch failed", "err", err)
			continue
		}
		var evs []Event
		var last jetstream.Msg
		var lastSeq uint64
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			last, lastSeq = msg, md.Sequence.Stream
			if lastSeq <= ckpt {
				continue // redelivered, already applied
			}
			ev, err := stream.Decode(msg.Subject(), msg.Data())
			if err != nil {
				if derr := m.deadLetter(ctx, msg, err); derr != nil {
					return derr
				}
				continue
			}
			evs = append(evs, Event{Seq: lastSeq, Event: ev})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			log.Warn("fetch ended with error", "err", err)
		}
		if last == nil || lastSeq <= ckpt {
			continue
		}
		if err := m.cfg.Sink.Apply(ctx, cluster, evs, lastSeq); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("apply up to seq %d: %w", lastSeq, err)
		}
		ckpt = lastSeq
		m.setApplied(cluster, ckpt)
		if m.cfg.Observer != nil {
			m.cfg.Observer(cluster, evs, lastSeq)
		}
		if err := last.Ack(); err != nil {
			// The checkpoint in the sink is the truth; a lost ack only causes
			// a redelivery that is skipped.
			log.Debug("ack failed", "err", err)
		}
	}
	return nil
}

func (m *Materializer) setApplied(cluster string, seq uint64) {
	m.mu.Lock()
	m.applied[cluster] = seq
	m.mu.Unlock()
}

// deadLetter keeps a poison message with its reason and moves on.
func (m *Materializer) deadLetter(ctx context.Context, msg jetstream.Msg, reason error) error {
	md, _ := msg.Metadata()
	dl := nats.NewMsg(deadSubject + "." + m.cfg.Name)
	dl.Data = msg.Data()
	dl.Header.Set("Fv-Reason", reason.Error())
	dl.Header.Set("Fv-Subject", msg.Subject())
	if md != nil {
		dl.Header.Set("Fv-Stream", md.Stream)
		dl.Header.Set("Fv-Seq", fmt.Sprint(md.Sequence.Stream))
	}
	if _, err := m.js.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("dead-letter %s: %w", msg.Subject(), err)
	}
	m.log.Warn("poison event dead-lettered", "subject", msg.Subject(), "reason", reason)
	return nil
}
