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
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/fleetview/fleetview/backends"
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
	dir := backends.RebuildDir(o.StateDir)
	if _, err := os.Stat(filepath.Join(dir, backends.RebuiltMarker)); err == nil {
		fmt.Fprintf(out, "rebuild already finished in %s; the next start of fleetview serve/up switches to it\n", dir)
		return nil
	}
	nc, err := nats.Connect(o.NATSURL, nats.Name("fleetview-rebuild"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	var p *progress
	err = backends.Rebuild(ctx, backends.RebuildConfig{
		NATS: nc, StateDir: o.StateDir, BatchSize: o.BatchSize, Logger: log,
		Progress: func(applied, total uint64) {
			if p == nil {
				p = newProgress(out, o.Progress, total)
			}
			p.update(applied)
		},
	})
	if p == nil {
		p = newProgress(out, o.Progress, 0)
	}
	if err != nil {
		p.finish("interrupted; run fleetview rebuild again to resume")
		return err
	}
	p.finish("done")
	fmt.Fprintf(out, "rebuilt %s; the next start of fleetview serve/up switches to it\n", dir)
	return nil
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
