package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/store/badger"
)

// HistoryOptions turn on and bound the history the Badger store keeps of
// every change (issue #48, docs/history.md): a retention window and a byte
// budget; either at 0 turns history off too.
//
// Off by default: at 1M Pods ingested, serve with history on applied 2,600
// events/s against 27,000 without and peaked at 15 GB of RSS (measured
// with a leak since fixed, to be measured again)
// (docs/benchmarks/history.md, "At a million objects (2026-12-06 20:03
// UTC): why history is off by default"); a default must not cost that
// until the write path is fixed.
type HistoryOptions struct {
	Enabled   bool
	Retention time.Duration
	MaxBytes  int64
	// StreamDepth is the messages per object each cluster stream keeps
	// while history is on (stream.DefaultHistoryDepth says why that many),
	// so that an object's changes do not replace one another on the
	// stream before the materializer records each. 0:
	// stream.DefaultHistoryDepth (options built in code).
	StreamDepth int
	// RetainInterval is how often the store removes what fell out of the
	// window; 0: the store's default (a minute). No flag: options built
	// in code set it, so that a test whose window must pass waits
	// seconds for the removal, not up to a minute.
	RetainInterval time.Duration
}

// AddFlags registers the flags.
func (o *HistoryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "history", false, "keep every change of the objects the Badger store holds, within --history-retention and --history-max-bytes (docs/history.md; off by default for its ingest cost at scale)")
	fs.DurationVar(&o.Retention, "history-retention", 24*time.Hour, "how long the Badger store keeps every change of the objects it holds (revisions, the change feed, deleted objects, as-of reads, watch resume); 0 turns history off")
	fs.Int64Var(&o.MaxBytes, "history-max-bytes", 1<<30, "the most bytes of history kept (all clusters); past it the oldest changes go first, within the retention or not; 0 turns history off")
	fs.IntVar(&o.StreamDepth, "history-stream-depth", stream.DefaultHistoryDepth, "with --history, the most changes of one object each cluster stream keeps until the hub records them (and a rebuild replays; 0: 8); without --history the streams keep 1")
}

// Validate reports every problem at once.
func (o *HistoryOptions) Validate() []error {
	var errs []error
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("%w: --history-retention %s: must not be negative", ErrInvalidOptions, o.Retention))
	}
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: --history-max-bytes %d: must not be negative", ErrInvalidOptions, o.MaxBytes))
	}
	if o.StreamDepth < 0 || o.StreamDepth > stream.MaxHistoryDepth {
		errs = append(errs, fmt.Errorf("%w: --history-stream-depth %d: must be between 0 and %d", ErrInvalidOptions, o.StreamDepth, stream.MaxHistoryDepth))
	}
	if o.RetainInterval < 0 {
		errs = append(errs, fmt.Errorf("%w: history RetainInterval %s: must not be negative (the store would never remove what falls out of the window)", ErrInvalidOptions, o.RetainInterval))
	}
	return errs
}

// streamDepth is the messages per object the hub makes every cluster
// stream keep: the depth with history on, 1 (the current state) without,
// which also lowers a stream a hub with history left deeper.
func (o HistoryOptions) streamDepth() int {
	switch {
	case !o.on():
		return 1
	case o.StreamDepth == 0:
		return stream.DefaultHistoryDepth
	}
	return o.StreamDepth
}

// badger is the store's history configuration.
func (o HistoryOptions) badger() badger.HistoryOptions {
	if !o.on() {
		return badger.HistoryOptions{}
	}
	return badger.HistoryOptions{Retention: o.Retention, MaxBytes: o.MaxBytes, RetainInterval: o.RetainInterval}
}

// on: history is asked for and has room.
func (o HistoryOptions) on() bool { return o.Enabled && o.Retention > 0 && o.MaxBytes > 0 }
