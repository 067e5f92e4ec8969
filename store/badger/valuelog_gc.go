package badger

import (
	"context"
	"errors"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// valueLogGCRatio is the share of a value-log file that must be superseded
// objects before the GC rewrites it: at 0.5, rewriting a file costs at most
// as much as the space it frees, and the value log stays under about twice
// the live data.
const valueLogGCRatio = 0.5

// runValueLogGC reclaims value-log space every interval until ctx ends.
// Every update of an object appends its new JSON to the value log and
// leaves the old one behind; Badger frees that space only when asked, so a
// cache of objects that change all the time (Pods) would otherwise grow on
// disk without bound.
func (s *Store) runValueLogGC(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.collectValueLog(ctx)
		if err != nil {
			s.log.Warn("value-log GC", "err", err, "rewritten", n)
		} else if n > 0 {
			s.log.Info("value-log GC", "rewritten", n)
		}
	}
}

// collectValueLog rewrites value-log files, one at a time, while Badger
// finds one that is at least valueLogGCRatio superseded, and returns how
// many it rewrote.
func (s *Store) collectValueLog(ctx context.Context) (int, error) {
	n := 0
	for ctx.Err() == nil {
		err := s.db.RunValueLogGC(valueLogGCRatio)
		if errors.Is(err, bdg.ErrNoRewrite) || errors.Is(err, bdg.ErrRejected) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
