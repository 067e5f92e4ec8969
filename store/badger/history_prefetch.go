package badger

import (
	"bytes"
	"errors"
	"sync"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// prefetchWorkers is how many reads of previous objects a batch has in
// flight at once. The reads are random value-log reads whose pages the
// recycler dropped: on one goroutine each update waited for its own
// (measured: docs/benchmarks/history.md), several in flight overlap the
// waits, and the CPU they use is a record's decode and a copy.
const prefetchWorkers = 8

// prefetchPrevious reads, before the batch is applied, the stored JSON of
// every object the batch's upserts may replace, several at once, so the
// history's patches (currentJSON) do not wait for the value log one
// update at a time. It only reads: a key this batch or the batch in
// flight wrote is answered by their overlays first (currentJSON), and a
// key known absent (an add) is not read. It runs before the batch's first
// write, so the transaction's pending writes are not being changed while
// its Gets run (Badger's Txn tracks reads under its own lock).
func (w *writer) prefetchPrevious(events []feed.Event) error {
	if !w.hist.on {
		return nil
	}
	var keys [][]byte
	seen := map[string]bool{}
	for i := range events {
		ev := events[i].Event
		if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			continue
		}
		key := objKey(stream.GVR(ev.GetGvr()), ev.GetNamespace(), ev.GetName(), w.cluster)
		if _, known := w.unread(key); known || seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		keys = append(keys, key)
	}
	if len(keys) < 2 {
		return nil // one read gains nothing from a goroutine
	}
	out := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(prefetchWorkers, len(keys)) {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = storedJSON(w.txn, keys[i])
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	w.fetched = make(map[string][]byte, len(keys))
	for i, k := range keys {
		w.fetched[string(k)] = out[i]
	}
	return nil
}

// storedJSON is the object's JSON at key in txn's snapshot (a copy), nil
// when there is none.
func storedJSON(txn *bdg.Txn, key []byte) ([]byte, error) {
	it, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []byte
	err = it.Value(func(v []byte) error {
		r, err := decodeRecord(v, false)
		out = bytes.Clone(r.json)
		return err
	})
	return out, err
}
