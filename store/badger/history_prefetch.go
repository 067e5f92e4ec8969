package badger

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// prefetchWorkers is how many reads of previous objects a batch has in
// flight at once. The reads are random value-log reads whose pages the
// recycler dropped: on one goroutine each update waited for its own
// (measured: docs/benchmarks/history.md), several in flight overlap the
// waits, and the CPU they use is a record's decode and a copy. The same
// workers make the history's patches (history_pre.go): CPU, which on
// two cores gains from two of them and loses nothing from eight.
const prefetchWorkers = 8

// prefetchPrevious reads, before the batch is applied, the stored JSON of
// every object the batch's upserts may replace, several at once, so the
// history's patches (currentJSON) do not wait for the value log one
// update at a time; and makes, on the same workers, what of each upsert's
// history depends only on the event and that JSON (history_pre.go). It
// only reads: a key this batch or the batch in flight wrote is answered
// by their overlays first (currentJSON), and a key known absent (an add)
// is not read. It runs before the batch's first write, so the
// transaction's pending writes are not being changed while its Gets run
// (Badger's Txn tracks reads under its own lock).
func (w *writer) prefetchPrevious(events []feed.Event) error {
	if !w.hist.on {
		return nil
	}
	type job struct {
		e      *feed.Event
		key    []byte // nil: not read
		absent bool   // known not stored
	}
	var jobs []job
	reads := 0
	seen := map[string]bool{}
	for i := range events {
		ev := events[i].Event
		if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			continue
		}
		key := objKey(stream.GVR(ev.GetGvr()), ev.GetNamespace(), ev.GetName(), w.cluster)
		j := job{e: &events[i]}
		if st, known := w.unread(key); known {
			j.absent = st.gone
		} else if !seen[string(key)] {
			seen[string(key)] = true
			j.key = key
			reads++
		}
		if j.key != nil || !w.s.histSerial {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) < 2 {
		return nil // one event gains nothing from a goroutine
	}
	pres := make([]histPre, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(prefetchWorkers, len(jobs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				errs[i] = w.preHistory(jobs[i].e, jobs[i].key, jobs[i].absent, &pres[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if reads > 0 {
		w.fetched = make(map[string][]byte, reads)
	}
	w.pre = make(map[*feed.Event]*histPre, len(jobs))
	for i, j := range jobs {
		if j.key != nil {
			w.fetched[string(j.key)] = pres[i].old
		}
		w.pre[j.e] = &pres[i]
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
