package badger

import (
	"context"
	"math/rand/v2"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// applyWithoutPrepass applies a batch as Apply does, without the
// relations' read-ahead (relatePrepass): relate reads every object itself.
func applyWithoutPrepass(s *Store, cluster string, events []feed.Event, lastSeq uint64) error {
	w, err := s.newWriter(context.Background(), cluster, nil, nil)
	if err != nil {
		return err
	}
	defer w.txn.Discard()
	for i := range events {
		if err := w.apply(&events[i]); err != nil {
			return err
		}
	}
	return w.commit(lastSeq)
}

// storeContents is every key and value of the store.
func storeContents(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key())] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRelatePrepassSameBytes: the stores written with the relations read
// ahead (Apply, and Prepare then Commit) hold the same bytes, key for
// key, as one written without, over random batches of a random graph's
// upserts (new labels, edges, uids), deletes, an object changed twice in
// a batch and an event sent twice (the same bytes).
func TestRelatePrepassSameBytes(t *testing.T) {
	viaApply, viaPrepare, without := openQuiet(t), openQuiet(t), openQuiet(t)
	rng := rand.New(rand.NewPCG(49, 7))
	fleet := randFleet()
	clusters := []string{"c1", "c2"}
	seqs := map[string]uint64{}
	live := map[string]map[int]string{"c1": {}, "c2": {}}
	upserts, twice, resent := 0, 0, 0
	for round := range 8 {
		for _, c := range clusters {
			var b []*fleetviewv1.ResourceEvent
			inBatch := map[int]bool{}
			for range 40 {
				if len(b) > 0 && rng.IntN(10) == 0 {
					b = append(b, b[len(b)-1]) // the same event (and bytes) again
					resent++
					continue
				}
				i := rng.IntN(len(fleet))
				if inBatch[i] {
					twice++
				}
				inBatch[i] = true
				e := randEvent(rng, c, fleet, live[c], i, round, 6)
				if e.Type == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
					upserts++
				}
				b = append(b, e)
			}
			batch := func() []feed.Event {
				out := make([]feed.Event, len(b))
				for i, e := range b {
					out[i] = feed.Event{Seq: seqs[c] + uint64(i) + 1, Event: e}
				}
				return out
			}
			last := seqs[c] + uint64(len(b))
			if err := viaApply.Apply(context.Background(), c, batch(), last); err != nil {
				t.Fatal(err)
			}
			p, err := viaPrepare.Prepare(context.Background(), c, batch(), last)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-p.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := applyWithoutPrepass(without, c, batch(), last); err != nil {
				t.Fatal(err)
			}
			seqs[c] = last
		}
		want := storeContents(t, without)
		for _, got := range []struct {
			name string
			s    *Store
		}{{"Apply", viaApply}, {"Prepare", viaPrepare}} {
			have := storeContents(t, got.s)
			for k, v := range want {
				if hv, ok := have[k]; !ok || hv != v {
					t.Fatalf("round %d, %s: key %q: %q (present %v), without the read-ahead %q", round, got.name, k, hv, ok, v)
				}
			}
			for k := range have {
				if _, ok := want[k]; !ok {
					t.Fatalf("round %d, %s: key %q not written without the read-ahead", round, got.name, k)
				}
			}
		}
	}
	// The batches had what the read-ahead must get right.
	if twice == 0 || resent == 0 || upserts < 400 {
		t.Fatalf("%d upserts, %d objects changed twice in a batch, %d events sent twice", upserts, twice, resent)
	}
	t.Logf("%d upserts, %d objects changed twice in a batch, %d events sent twice", upserts, twice, resent)
}

// openQuiet opens a store in a temporary directory, closed when the test
// ends, with no value log collection to run beside the test's writes.
func openQuiet(t testing.TB) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir(), ValueLogGCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkRelReadOf is what the read-ahead workers do for an added
// benchdata Pod (relReadOf with its edges): relDoc's pass, which reads the
// references too (relations.PodScan), the header's hash, the E/ edges and
// the R/ keys. It runs beside
// the apply loop, so it is the load's CPU more than its rate.
func BenchmarkRelReadOf(b *testing.B) {
	s := openQuiet(b)
	s.kinds.Store(kindSeen{podsGVR}, true)
	ev := benchdata.Event("c1", 7, 1)
	var buf relDocBuf
	b.SetBytes(int64(len(ev.Object)))
	for b.Loop() {
		rd := s.relReadOf(&buf, "c1", podsGVR, ev.Namespace, ev.Name, ev.Object, true)
		if rd == nil || rd.err != nil || rd.extErr != nil || len(rd.rkeys) == 0 {
			b.Fatal("not read whole")
		}
	}
}
