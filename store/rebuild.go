package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
)

// rebuildName is the rebuild's materializer; its durable consumers are
// the replica's own (Durable), so replicas can rebuild at once.
const rebuildName = "badger-rebuild"

// RebuildConfig configures Rebuild.
type RebuildConfig struct {
	NATS *nats.Conn
	// StateDir is the state directory of the serve to rebuild: the store
	// is replayed into RebuildDir(StateDir).
	StateDir  string
	BatchSize int
	// Progress, when set, is called every 50 ms with the events applied
	// so far and the total to apply.
	Progress func(applied, total uint64)
	Logger   *slog.Logger
	// Open opens the fresh default store the streams are replayed into
	// (Badger, for bulk loading), in dir.
	Open func(dir string, log *slog.Logger) (RebuildStore, error)
	// Named are the kinds of store registries can route to (Config.Named):
	// what they hold is left out of the default store.
	Named []Kind
}

// RebuildStore is the store a rebuild replays into: a sink, closed once
// the replay caught up.
type RebuildStore interface {
	materializer.Sink
	Close() error
}

// Rebuild replays every cluster stream, up to its last sequence when it
// started, into a fresh default store in RebuildDir and marks it finished
// (RebuiltMarker): the next New switches to it. The live store keeps
// serving meanwhile; an interrupted rebuild resumes from the checkpoints
// of the store it left.
func Rebuild(ctx context.Context, cfg RebuildConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Progress == nil {
		cfg.Progress = func(uint64, uint64) {}
	}
	r := &rebuild{cfg: cfg, log: cfg.Logger, dir: RebuildDir(cfg.StateDir), targets: map[string]uint64{}, start: map[string]uint64{}}
	replica, err := ReplicaID(cfg.StateDir)
	if err != nil {
		return err
	}
	r.durable = Durable(rebuildName, replica)
	if r.js, err = jetstream.New(cfg.NATS); err != nil {
		return err
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	if err := r.replay(ctx); err != nil {
		return err
	}
	return r.finish(ctx)
}

// rebuild is one run of `fleetview rebuild`.
type rebuild struct {
	cfg RebuildConfig
	log *slog.Logger
	dir string
	js  jetstream.JetStream
	// durable is the rebuild's consumer name on every stream.
	durable string

	store    RebuildStore
	mat      *materializer.Materializer
	clusters []string
	// targets and start are, per cluster, the stream's last sequence when
	// the rebuild started and the store's checkpoint then.
	targets, start map[string]uint64
	total          uint64
}

// open opens the store being rebuilt and its materializer, and notes where
// each stream ends now: the rebuild replays up to there.
func (r *rebuild) open(ctx context.Context) (err error) {
	b, err := OpenBuckets(ctx, r.cfg.NATS, 0)
	if err != nil {
		return err
	}
	// Replay what the live default store's materializer keeps: the
	// resources not routed to a named backend.
	filter, err := DefaultFilter(ctx, b.Registries, b.Inventory, r.cfg.Named, r.log)
	if err != nil {
		return err
	}
	if r.cfg.Open == nil {
		return ErrNoDefaultStore
	}
	if r.store, err = r.cfg.Open(r.dir, r.log); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = r.store.Close()
		}
	}()
	if r.clusters, err = ClusterStreams(ctx, r.js); err != nil {
		return err
	}
	for _, c := range r.clusters {
		st, err := r.js.Stream(ctx, stream.StreamName(c))
		if err != nil {
			return err
		}
		ckpt, err := r.store.Checkpoint(ctx, c)
		if err != nil {
			return err
		}
		last := st.CachedInfo().State.LastSeq
		r.targets[c], r.start[c] = last, min(ckpt, last)
		r.total += last - r.start[c]
	}
	r.mat, err = materializer.New(materializer.Config{Name: rebuildName, Durable: r.durable, NATS: r.cfg.NATS, Sink: r.store, BatchSize: r.cfg.BatchSize, Filter: filter, Clusters: r.clusters, Logger: r.log})
	return err
}

// caughtUp is whether every stream is applied up to its target, and how
// many events were applied so far.
func (r *rebuild) caughtUp() (bool, uint64) {
	applied := r.mat.Applied()
	var n uint64
	ok := true
	for c, t := range r.targets {
		a := min(applied[c], t)
		if a < t {
			ok = false
		}
		if a > r.start[c] {
			n += a - r.start[c]
		}
	}
	return ok, n
}

// replay runs the materializer until it caught up with the targets, then
// closes the store.
func (r *rebuild) replay(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.mat.Run(rctx) }()
	runErr := r.wait(ctx, done)
	cancel()
	// Caught up, the materializer is stopped by rctx: a store already
	// caught up (an empty hub) stops it while it is still starting, and
	// the cancellation it reports then is not a failure.
	if err := <-done; err != nil && runErr == nil && !(errors.Is(err, context.Canceled) && ctx.Err() == nil) {
		runErr = err
	}
	// Closing flushes the memtables to tables and waits for a compaction
	// under way: part of the rebuild's time, worth seeing in the log.
	closing := time.Now()
	if cerr := r.store.Close(); cerr != nil && runErr == nil {
		runErr = cerr
	}
	r.log.Info("rebuilt store closed", "took", time.Since(closing).Round(time.Millisecond))
	return runErr
}

// wait reports progress until the rebuild caught up, ctx ends or the
// materializer stops (its error is put back in done for replay).
func (r *rebuild) wait(ctx context.Context, done chan error) error {
	// Checking is cheap (a map under a lock), and how soon the end is
	// noticed is part of every rebuild's time.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, n := r.caughtUp()
		r.cfg.Progress(n, r.total)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			done <- nil
			return fmt.Errorf("materializer stopped: %v", err)
		case <-tick.C:
		}
	}
}

// finish drops the rebuild's consumers and marks the store finished.
func (r *rebuild) finish(ctx context.Context) error {
	for _, c := range r.clusters {
		if err := r.js.DeleteConsumer(ctx, stream.StreamName(c), r.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			r.log.Warn("rebuild consumer not deleted", "cluster", c, "err", err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.dir, RebuiltMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	return nil
}
