package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/progress"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

// RebuildOptions replay every cluster stream into a fresh Badger store.
//
// The switch happens at the next start of `fleetview serve` or `up`: a
// finished rebuild (<state-dir>/badger.new with its REBUILT marker) replaces
// <state-dir>/badger by renames before the store is opened. The live store
// keeps serving until then. An interrupted rebuild resumes from the
// checkpoints in badger.new.
type RebuildOptions struct {
	StateDir string
	// NATSClientOptions reach the hub's NATS server with the credentials
	// it requires (the same flags as serve).
	NATSClientOptions
	BatchSize int
	// Indexes are the optional indexes the rebuilt store keeps: the
	// serving hub's --relations and --count-index.
	Indexes IndexOptions
	// Progress is "auto" (a bar on a terminal, log lines otherwise), "bar",
	// "log" or "none".
	Progress string
	// Out receives the progress (stderr when nil).
	Out io.Writer
}

// AddFlags registers the flags.
func (o *RebuildOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "fleetview-state", "state directory of the fleetview serve/up to rebuild")
	o.NATSClientOptions.AddFlags(fs)
	o.Indexes.AddFlags(fs)
	fs.IntVar(&o.BatchSize, "batch-size", 1000, "events per Badger transaction")
	fs.StringVar(&o.Progress, "progress", "auto", "progress display: auto, bar, log or none")
}

// Validate reports every problem at once.
func (o *RebuildOptions) Validate() []error {
	var errs []error
	if o.StateDir == "" {
		errs = append(errs, fmt.Errorf("%w: --state-dir is required", ErrInvalidOptions))
	}
	errs = append(errs, o.NATSClientOptions.Validate()...)
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
	dir := store.RebuildDir(o.StateDir)
	if _, err := os.Stat(filepath.Join(dir, store.RebuiltMarker)); err == nil {
		fmt.Fprintf(out, "rebuild already finished in %s; the next start of fleetview serve/up switches to it\n", dir)
		return nil
	}
	nc, err := o.NATSClientOptions.connect("fleetview-rebuild", nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	var p *progress.Progress
	noRel, values := o.Indexes.badger()
	err = store.Rebuild(ctx, store.RebuildConfig{
		NATS: nc, StateDir: o.StateDir, BatchSize: o.BatchSize, Logger: log,
		Open: badger.RebuildOpener(badger.Options{NoRelations: noRel, ValueIndex: values, NoCounters: len(values) == 0}), Named: namedStores(opensearch.Config{}),
		Progress: func(applied, total uint64) {
			if p == nil {
				p = progress.New(out, "rebuild", o.Progress, total)
			}
			p.Update(applied)
		},
	})
	if p == nil {
		p = progress.New(out, "rebuild", o.Progress, 0)
	}
	if err != nil {
		p.Finish("interrupted; run fleetview rebuild again to resume")
		return err
	}
	p.Finish("done")
	fmt.Fprintf(out, "rebuilt %s; the next start of fleetview serve/up switches to it\n", dir)
	return nil
}
