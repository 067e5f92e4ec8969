package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
)

// preScript is random batches over a few Pod names: adds, updates (small
// ones that keep a reverse patch, large ones whose revision keeps the
// previous state whole, label changes, updates that keep the
// resourceVersion), deletes, re-creates under the same name with a new
// uid (with and without a delete first), and the same name several
// times in one batch.
func preScript(rng *rand.Rand, names, batches, perBatch int) [][]feed.Event {
	type pod struct {
		uid   string
		rv    int
		tier  string
		phase string
	}
	live := map[int]*pod{}
	uids := 0
	seq, at := uint64(0), 0
	var out [][]feed.Event
	for range batches {
		var evs []feed.Event
		for range perBatch {
			seq++
			at++
			n := rng.IntN(names)
			name := fmt.Sprintf("p%d", n)
			p := live[n]
			op := rng.IntN(10)
			switch {
			case p != nil && op == 0: // delete
				evs = append(evs, podDelete(seq, p.uid, name, p.rv+1, at))
				delete(live, n)
				continue
			case p == nil || op == 1: // add, or a new uid takes the name
				uids++
				p = &pod{uid: uuidOf(uids), rv: 1, tier: "a", phase: "Pending"}
				live[n] = p
			case op == 2: // the labels change
				p.rv++
				p.tier = fmt.Sprintf("t%d", rng.IntN(3))
			case op == 3: // a large change: no patch much smaller than the object
				p.rv++
				p.phase = strings.Repeat(string(rune('a'+rng.IntN(26))), 300+rng.IntN(400))
			case op == 4: // the same resourceVersion again
			default:
				p.rv++
				p.phase = fmt.Sprintf("Running-%d", rng.IntN(100))
			}
			evs = append(evs, podUpsert(seq, p.uid, name, p.rv, p.tier, p.phase, at))
		}
		out = append(out, evs)
	}
	return out
}

// storeDump is every key and value the store holds.
func storeDump(t *testing.T, s *Store) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	if err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = v
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// openPreStore is openHistory's store, its memtables memTable bytes when
// set.
func openPreStore(t *testing.T, h HistoryOptions, memTable int64) *Store {
	t.Helper()
	if memTable == 0 {
		s, _ := openHistory(t, h)
		return s
	}
	h.Retention, h.MaxBytes, h.RetainInterval = 24*time.Hour, 1<<30, -1
	s, err := Open(Options{Dir: t.TempDir(), History: h, ValueLogGCInterval: -1, MemTableSize: memTable})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.db.Update(func(txn *bdg.Txn) error {
		return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(t0.Add(-time.Hour).UnixNano())))
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHistoryPreStage: a store whose batches make the history's patches,
// compressed states and keys in the parallel pre-stage (history_pre.go)
// holds, after the same random batches applied through the pipelined
// path, exactly the keys and values of one that makes them on the serial
// path (histSerial).
func TestHistoryPreStage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seed      uint64
		names     int
		batches   int
		perBatch  int
		snapshots int
		// memTable, when set, makes transactions small enough that
		// batches are committed in prefixes (Store.Apply), and the event
		// that did not fit is applied again, its own record then in the
		// overlay (the pre-stage's patch must not be used).
		memTable int64
	}{
		{"small batches", 1, 8, 40, 6, 3, 0},
		{"large batches", 2, 300, 12, 60, 4, 0},
		{"default snapshots", 3, 40, 20, 30, 0, 0},
		{"batches in prefixes", 4, 400, 10, 100, 4, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := preScript(rand.New(rand.NewPCG(tc.seed, 7)), tc.names, tc.batches, tc.perBatch)
			h := HistoryOptions{SnapshotEvery: tc.snapshots}
			par, ser := openPreStore(t, h, tc.memTable), openPreStore(t, h, tc.memTable)
			ser.histSerial = true
			var made struct{ patched, whole, keyed int }
			splits := 0
			for _, s := range []*Store{par, ser} {
				ctx := context.Background()
				var inflight <-chan error
				for _, batch := range script {
					evs := append([]feed.Event(nil), batch...)
					p, err := s.Prepare(ctx, "c1", evs, evs[len(evs)-1].Seq)
					if err != nil {
						t.Fatal(err)
					}
					pw, ok := p.(*prepared)
					if !ok { // committed in prefixes (Store.Apply)
						splits++
						continue
					}
					for _, pre := range pw.w.pre {
						if s == ser && (pre.patched || pre.keyed || pre.name != nil) {
							t.Fatalf("the serial store's pre-stage made %+v", pre)
						}
						if pre.patched {
							made.patched++
						}
						if pre.whole != nil {
							made.whole++
						}
						if pre.keyed {
							made.keyed++
						}
					}
					if inflight != nil {
						if err := <-inflight; err != nil {
							t.Fatal(err)
						}
					}
					inflight = p.Commit()
				}
				if inflight != nil {
					if err := <-inflight; err != nil {
						t.Fatal(err)
					}
				}
			}
			if (splits > 0) != (tc.memTable > 0) {
				t.Fatalf("%d batches committed in prefixes", splits)
			}
			if made.patched == 0 || made.whole == 0 || made.keyed == 0 {
				t.Fatalf("the pre-stage made %+v: the script does not exercise it (%d of %d batches in prefixes)", made, splits, 2*len(script))
			}
			a, b := storeDump(t, par), storeDump(t, ser)
			hist := 0
			for k, v := range a {
				if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
					t.Errorf("key %q: pre-stage %q, serial %q (present %v)", k, v, w, ok)
				}
				if strings.ContainsRune("rftxnHJ", rune(k[0])) {
					hist++
				}
			}
			for k := range b {
				if _, ok := a[k]; !ok {
					t.Errorf("key %q: only the serial store has it", k)
				}
			}
			if hist == 0 {
				t.Fatal("no history keys stored")
			}
		})
	}
}

// TestHistoryPreStageUnobserved: the pre-stage keys an observed upsert's
// change, leaves an unobserved one's keys to the apply (its time is the
// clock's then: eventTime), and makes nothing for a delete.
func TestHistoryPreStageUnobserved(t *testing.T) {
	s, _ := openHistory(t, HistoryOptions{})
	ctx := context.Background()
	a, b := podUpsert(1, uuidOf(1), "a", 1, "x", "Pending", 1), podUpsert(2, uuidOf(2), "b", 1, "x", "Pending", 2)
	b.Event.ObservedUnixNano = 0
	d := podDelete(3, uuidOf(1), "a", 2, 3)
	evs := []feed.Event{a, b, d}
	p, err := s.Prepare(ctx, "c1", evs, 3)
	if err != nil {
		t.Fatal(err)
	}
	pre := p.(*prepared).w.pre
	if len(pre) != 2 || !pre[&evs[0]].keyed || pre[&evs[1]].keyed || pre[&evs[2]] != nil {
		t.Errorf("pre-stage: %d entries, keyed %v %v, delete's %v", len(pre), pre[&evs[0]] != nil && pre[&evs[0]].keyed,
			pre[&evs[1]] != nil && pre[&evs[1]].keyed, pre[&evs[2]])
	}
	if err := <-p.Commit(); err != nil {
		t.Fatal(err)
	}
	// The three changes are recorded, the unobserved one at the clock's time.
	if n := storedKeys(t, s, []byte{'t'}); n != 3 {
		t.Errorf("%d t/ entries, want 3", n)
	}
}
