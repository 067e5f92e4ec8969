package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/store/badger"
)

// HistoryOptions bound the history the Badger store keeps of every change
// (issue #48, docs/history.md): a retention window and a byte budget;
// either at 0 turns history off.
type HistoryOptions struct {
	Retention time.Duration
	MaxBytes  int64
}

// AddFlags registers the flags.
func (o *HistoryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Retention, "history-retention", 24*time.Hour, "how long the Badger store keeps every change of the objects it holds (revisions, the change feed, deleted objects, as-of reads, watch resume); 0 turns history off")
	fs.Int64Var(&o.MaxBytes, "history-max-bytes", 1<<30, "the most bytes of history kept (all clusters); past it the oldest changes go first, within the retention or not; 0 turns history off")
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
	return errs
}

// badger is the store's history configuration.
func (o HistoryOptions) badger() badger.HistoryOptions {
	return badger.HistoryOptions{Retention: o.Retention, MaxBytes: o.MaxBytes}
}
