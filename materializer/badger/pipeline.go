package badger

import (
	"context"
	"errors"
	"fmt"
	"sync"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Pipelined writes: Badger commits on one writer goroutine, and a
// transaction opened after a commit was issued waits for that commit. So
// ApplyAsync builds batch N+1 in a transaction opened *before* batch N was
// committed, while N's commit runs, and reads N's writes from an overlay
// (the labels of the objects N upserts). Only all-upsert batches take this
// path; a batch with a delete or a removal (which read uid mappings and
// scan prefixes) first waits for the commit in flight and uses a fresh
// transaction. Commits are issued in batch order, so a later batch's
// writes win, and each carries its own checkpoint: a kill at any point
// leaves a store that matches its checkpoint.

// pipe is the pipelining state of one cluster stream (one writer each).
type pipe struct {
	next     *bdg.Txn // opened before the commit in flight was issued
	inflight *commit
	overlay  map[string]map[string]string // object key -> labels written by the commit in flight
}

type commit struct {
	done chan struct{}
	err  error
}

func (c *commit) wait() error {
	if c == nil {
		return nil
	}
	<-c.done
	return c.err
}

type pipes struct {
	mu sync.Mutex
	m  map[string]*pipe
}

func (s *Store) pipe(cluster string) *pipe {
	s.pipes.mu.Lock()
	defer s.pipes.mu.Unlock()
	if s.pipes.m == nil {
		s.pipes.m = map[string]*pipe{}
	}
	p := s.pipes.m[cluster]
	if p == nil {
		p = &pipe{}
		s.pipes.m[cluster] = p
	}
	return p
}

// drain waits for every commit in flight and drops the prepared
// transactions (before Close).
func (s *Store) drain() {
	s.pipes.mu.Lock()
	defer s.pipes.mu.Unlock()
	for _, p := range s.pipes.m {
		_ = p.inflight.wait()
		if p.next != nil {
			p.next.Discard()
			p.next = nil
		}
	}
}

var _ materializer.AsyncSink = (*Store)(nil)

// ApplyAsync implements materializer.AsyncSink: it returns once the batch
// is handed to Badger; wait returns when it is committed and visible. The
// caller must not call ApplyAsync for the same cluster concurrently.
func (s *Store) ApplyAsync(ctx context.Context, cluster string, events []materializer.Event, lastSeq uint64) (func() error, error) {
	p := s.pipe(cluster)
	simple := true
	for _, e := range events {
		if e.Event.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT && e.Event.GetType() != fleetviewv1.EventType_EVENT_TYPE_SYNCED {
			simple = false
			break
		}
	}
	txn, overlay := p.next, p.overlay
	p.next = nil
	if !simple || txn == nil {
		if txn != nil {
			txn.Discard()
		}
		if err := p.inflight.wait(); err != nil {
			return nil, err
		}
		txn, overlay = s.db.NewTransaction(true), nil
	}
	written := make(map[string]map[string]string, len(events))
	for _, e := range events {
		if err := ctx.Err(); err != nil {
			txn.Discard()
			return nil, err
		}
		var err error
		if e.Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			err = s.upsertWith(txn, cluster, e, overlay, written)
		} else {
			err = s.applyOne(txn, cluster, e)
		}
		if errors.Is(err, bdg.ErrTxnTooBig) {
			// Too big for one transaction: commit it in prefixes, in order.
			txn.Discard()
			if err := p.inflight.wait(); err != nil {
				return nil, err
			}
			p.overlay = nil
			return func() error { return nil }, s.Apply(ctx, cluster, events, lastSeq)
		}
		if err != nil {
			txn.Discard()
			return nil, fmt.Errorf("apply seq %d: %w", e.Seq, err)
		}
	}
	if err := setCheckpoint(txn, cluster, lastSeq); err != nil {
		txn.Discard()
		return nil, err
	}
	// The previous commit has run while this batch was built; wait for it,
	// then open the next batch's transaction before committing this one.
	if err := p.inflight.wait(); err != nil {
		txn.Discard()
		return nil, err
	}
	if simple {
		p.next = s.db.NewTransaction(true)
	} else {
		// Deletes and removals changed keys the overlay does not track:
		// the next batch starts from a fresh transaction instead.
		written = nil
	}
	c := &commit{done: make(chan struct{})}
	txn.CommitWith(func(err error) {
		c.err = err
		close(c.done)
	})
	p.inflight, p.overlay = c, written
	return c.wait, nil
}

// upsertWith is upsert reading the previous labels through the overlay of
// the commit in flight, and recording what it writes.
func (s *Store) upsertWith(txn *bdg.Txn, cluster string, e materializer.Event, overlay, written map[string]map[string]string) error {
	ev := e.Event
	key := objKey(gvrOf(ev), ev.GetNamespace(), ev.GetName(), cluster)
	var old map[string]string
	if l, ok := written[string(key)]; ok {
		old = l
	} else if l, ok := overlay[string(key)]; ok {
		old = l
	} else {
		var err error
		if old, err = s.oldLabels(txn, key); err != nil {
			return err
		}
	}
	lbls, err := s.writeUpsert(txn, cluster, e, key, old)
	if err != nil {
		return err
	}
	if lbls == nil {
		lbls = map[string]string{}
	}
	written[string(key)] = lbls
	return nil
}
