package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/fleetview/fleetview/internal/inventory"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/badger"
)

const (
	badgerDir = "badger"
	// rebuildDir is where `fleetview rebuild` replays the streams while the
	// live store keeps serving; rebuiltMarker says the replay finished.
	rebuildDir    = "badger.new"
	rebuiltMarker = "REBUILT"
	rebuildName   = "badger-rebuild"
)

// RebuildOptions replay every cluster stream into a fresh Badger store.
//
// The switch happens at the next start of `fleetview serve` or `up`: a
// finished rebuild (<state-dir>/badger.new with its REBUILT marker) replaces
// <state-dir>/badger by renames before the store is opened. The live store
// keeps serving until then. An interrupted rebuild resumes from the
// checkpoints in badger.new.
type RebuildOptions struct {
	StateDir  string
	NATSURL   string
	BatchSize int
	// Progress is "auto" (a bar on a terminal, log lines otherwise), "bar",
	// "log" or "none".
	Progress string
	// Out receives the progress (stderr when nil).
	Out io.Writer
}

// AddFlags registers the flags.
func (o *RebuildOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "fleetview-state", "state directory of the fleetview serve/up to rebuild")
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.IntVar(&o.BatchSize, "batch-size", 1000, "events per Badger transaction")
	fs.StringVar(&o.Progress, "progress", "auto", "progress display: auto, bar, log or none")
}

// Validate reports every problem at once.
func (o *RebuildOptions) Validate() []error {
	var errs []error
	if o.StateDir == "" {
		errs = append(errs, fmt.Errorf("%w: --state-dir is required", ErrInvalidOptions))
	}
	if o.NATSURL == "" {
		errs = append(errs, fmt.Errorf("%w: --nats-url is required", ErrInvalidOptions))
	}
	if o.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: --batch-size %d must not be negative", ErrInvalidOptions, o.BatchSize))
	}
	switch o.Progress {
	case "auto", "bar", "log", "none":
	default:
		errs = append(errs, fmt.Errorf("%w: --progress %q must be auto, bar, log or none", ErrInvalidOptions, o.Progress))
	}
	return errs
}

// RunRebuild replays the streams, up to their last sequence when it
// started, into <state-dir>/badger.new and marks it finished.
func RunRebuild(ctx context.Context, o RebuildOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	out := o.Out
	if out == nil {
		out = os.Stderr
	}
	dir := filepath.Join(o.StateDir, rebuildDir)
	if _, err := os.Stat(filepath.Join(dir, rebuiltMarker)); err == nil {
		fmt.Fprintf(out, "rebuild already finished in %s; the next start of fleetview serve/up switches to it\n", dir)
		return nil
	}
	nc, err := nats.Connect(o.NATSURL, nats.Name("fleetview-rebuild"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	regs, err := regstore.Open(ctx, js)
	if err != nil {
		return err
	}
	inv, err := inventory.Bucket(ctx, js)
	if err != nil {
		return err
	}
	router := newRouter(regs, inv, OpenSearchID, log)
	if err := router.refresh(ctx); err != nil {
		return err
	}
	// Replay what the live Badger materializer keeps: the resources not
	// routed to an OpenSearch backend.
	var filter = router.Filter(defaultBackend)
	if len(router.table.Load().routes) == 0 {
		filter = nil
	}
	store, err := badger.Open(badger.Options{Dir: dir, Logger: log, BulkLoad: true})
	if err != nil {
		return err
	}
	targets, start := map[string]uint64{}, map[string]uint64{}
	clusters, err := clusterStreams(ctx, js)
	if err != nil {
		_ = store.Close()
		return err
	}
	var total uint64
	for _, c := range clusters {
		st, err := js.Stream(ctx, stream.StreamName(c))
		if err != nil {
			_ = store.Close()
			return err
		}
		ckpt, err := store.Checkpoint(ctx, c)
		if err != nil {
			_ = store.Close()
			return err
		}
		last := st.CachedInfo().State.LastSeq
		targets[c], start[c] = last, min(ckpt, last)
		total += last - start[c]
	}
	mat, err := materializer.New(materializer.Config{Name: rebuildName, NATS: nc, Sink: store, BatchSize: o.BatchSize, Filter: filter, Clusters: clusters, Logger: log})
	if err != nil {
		_ = store.Close()
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mat.Run(rctx) }()
	p := newProgress(out, o.Progress, total)
	caughtUp := func() (bool, uint64) {
		applied := mat.Applied()
		var n uint64
		ok := true
		for c, t := range targets {
			a := min(applied[c], t)
			if a < t {
				ok = false
			}
			if a > start[c] {
				n += a - start[c]
			}
		}
		return ok, n
	}
	// Checking is cheap (a map under a lock), and how soon the end is
	// noticed is part of every rebuild's time.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var runErr error
loop:
	for {
		ok, n := caughtUp()
		p.update(n)
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break loop
		case err := <-done:
			runErr = fmt.Errorf("materializer stopped: %v", err)
			done <- nil
			break loop
		case <-tick.C:
		}
	}
	cancel()
	if err := <-done; err != nil && runErr == nil {
		runErr = err
	}
	// Closing flushes the memtables to tables and waits for a compaction
	// under way: part of the rebuild's time, worth seeing in the log.
	closing := time.Now()
	if cerr := store.Close(); cerr != nil && runErr == nil {
		runErr = cerr
	}
	log.Info("rebuilt store closed", "took", time.Since(closing).Round(time.Millisecond))
	if runErr != nil {
		p.finish("interrupted; run fleetview rebuild again to resume")
		return runErr
	}
	p.finish("done")
	for _, c := range clusters {
		if err := js.DeleteConsumer(ctx, stream.StreamName(c), rebuildName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			log.Warn("rebuild consumer not deleted", "cluster", c, "err", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, rebuiltMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "rebuilt %s; the next start of fleetview serve/up switches to it\n", dir)
	return nil
}

// switchToRebuilt puts a finished rebuild in place of the live store. Each
// step is a rename, and every intermediate state is recognised on the next
// start, so a crash in between loses nothing.
func switchToRebuilt(stateDir string, log *slog.Logger) error {
	live, next := filepath.Join(stateDir, badgerDir), filepath.Join(stateDir, rebuildDir)
	if _, err := os.Stat(filepath.Join(next, rebuiltMarker)); err != nil {
		if _, err := os.Stat(next); err == nil {
			log.Info("an unfinished rebuild is in " + next + "; run fleetview rebuild to finish it")
		}
		return nil
	}
	old := live + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if _, err := os.Stat(live); err == nil {
		if err := os.Rename(live, old); err != nil {
			return fmt.Errorf("switch to the rebuilt store: %w", err)
		}
	}
	if err := os.Rename(next, live); err != nil {
		return fmt.Errorf("switch to the rebuilt store: %w", err)
	}
	if err := os.Remove(filepath.Join(live, rebuiltMarker)); err != nil {
		return err
	}
	log.Info("switched to the rebuilt store", "dir", live)
	return os.RemoveAll(old)
}

// progress shows how far a rebuild is: a bar with rate and ETA on a
// terminal, a log line every few seconds otherwise.
type progress struct {
	w       io.Writer
	bar     bool
	none    bool
	total   uint64
	began   time.Time
	lastLog time.Time
	last    uint64
}

func newProgress(w io.Writer, mode string, total uint64) *progress {
	p := &progress{w: w, total: total, began: time.Now(), none: mode == "none"}
	switch mode {
	case "bar":
		p.bar = true
	case "auto":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			p.bar = true
		}
	}
	return p
}

func (p *progress) line(n uint64) string {
	el := time.Since(p.began).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el
	}
	eta := "?"
	if rate > 0 && p.total >= n {
		eta = (time.Duration(float64(p.total-n)/rate) * time.Second).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(n) / float64(p.total)
	}
	return fmt.Sprintf("%5.1f%% %d/%d events  %.0f events/s  ETA %s", pct, n, p.total, rate, eta)
}

func (p *progress) update(n uint64) {
	p.last = n
	switch {
	case p.none:
	case p.bar:
		const width = 30
		filled := width
		if p.total > 0 {
			filled = int(uint64(width) * min(n, p.total) / p.total)
		}
		fmt.Fprintf(p.w, "\r[%s%s] %s ", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.line(n))
	case time.Since(p.lastLog) >= 5*time.Second:
		p.lastLog = time.Now()
		fmt.Fprintf(p.w, "rebuild: %s\n", p.line(n))
	}
}

func (p *progress) finish(what string) {
	if p.none {
		return
	}
	if p.bar {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "rebuild %s: %s in %v\n", what, p.line(p.last), time.Since(p.began).Round(time.Millisecond))
}
