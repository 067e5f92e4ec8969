package badger

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// dump is every key and value of the store, in key order.
func dump(t *testing.T, s *Store) string {
	t.Helper()
	var b bytes.Buffer
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if bytes.Equal(it.Item().Key(), beganKey) {
				continue // when the store was opened
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%q=%q\n", it.Item().Key(), v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func relabeled(i, rv int, tier string) *fleetviewv1.ResourceEvent {
	e := benchdata.Event("c1", i, rv)
	e.Object = bytes.Replace(e.Object, []byte(`"tier":"`), []byte(`"tier":"`+tier+`-`), 1)
	return e
}

func recreated(i, rv int) *fleetviewv1.ResourceEvent {
	e := benchdata.Event("c1", i, rv)
	e.Uid = fmt.Sprintf("reused-%d", i)
	e.Object = bytes.Replace(e.Object, []byte(benchdata.UID("c1", i)), []byte(e.Uid), 1)
	return e
}

// fmtPriors shows what each event replaced, as the watch hub reads it.
func fmtPriors(evs []feed.Event) string {
	var out []string
	for _, e := range evs {
		p := e.Prior
		switch {
		case !p.Told:
			out = append(out, "untold")
		case p.LabelsUnknown:
			out = append(out, "labels unknown")
		case p.Exists:
			out = append(out, "had tier="+p.Labels["tier"])
		default:
			out = append(out, "new")
		}
	}
	return fmt.Sprint(out)
}

// TestPreparedReadsBatchInFlight builds the second batch while the first is
// still uncommitted (its transaction's snapshot lacks the first batch), and
// checks the result equals applying both batches one after the other.
func TestPreparedReadsBatchInFlight(t *testing.T) {
	withAndWithoutHistory(t, testPreparedReadsBatchInFlight)
}

// withAndWithoutHistory runs a test of the write path without and with
// the history (which the same transactions write).
func withAndWithoutHistory(t *testing.T, f func(t *testing.T, h HistoryOptions)) {
	t.Run("without history", func(t *testing.T) { f(t, HistoryOptions{}) })
	t.Run("with history", func(t *testing.T) {
		f(t, HistoryOptions{Retention: time.Hour, MaxBytes: 1 << 30, SnapshotEvery: 4, RetainInterval: -1})
	})
}

func testPreparedReadsBatchInFlight(t *testing.T, h HistoryOptions) {
	removed := &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: stream.ProtoGVR(benchdata.PodGVR), Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}
	base := []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 0, 1), benchdata.Event("c1", 1, 1), benchdata.Event("c1", 2, 1)}
	for _, tc := range []struct {
		name         string
		first, after []*fleetviewv1.ResourceEvent
		// priors is what the events of after replaced (fmtPriors).
		priors string
	}{
		{"label change of an object created in flight", []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 5, 1)}, []*fleetviewv1.ResourceEvent{relabeled(5, 2, "x")}, "[had tier=backend]"},
		{"label change twice", []*fleetviewv1.ResourceEvent{relabeled(0, 2, "x")}, []*fleetviewv1.ResourceEvent{relabeled(0, 3, "y")}, "[had tier=x-frontend]"},
		{"delete of an object created in flight", []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 5, 1)}, []*fleetviewv1.ResourceEvent{benchdata.Delete("c1", 5, 2)}, "[had tier=backend]"},
		{"recreate after a delete in flight", []*fleetviewv1.ResourceEvent{benchdata.Delete("c1", 1, 2)}, []*fleetviewv1.ResourceEvent{recreated(1, 3)}, "[new]"},
		{"old uid's tombstone after the new uid in flight", []*fleetviewv1.ResourceEvent{recreated(2, 2)}, []*fleetviewv1.ResourceEvent{benchdata.Delete("c1", 2, 3)}, "[labels unknown]"},
		{"removal of objects created and deleted in flight", []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 5, 1), benchdata.Delete("c1", 0, 2)}, []*fleetviewv1.ResourceEvent{removed}, "[untold]"},
		{"removal in flight, then new objects", []*fleetviewv1.ResourceEvent{removed}, []*fleetviewv1.ResourceEvent{benchdata.Event("c1", 1, 5), relabeled(7, 1, "z")}, "[new new]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var seq uint64
			events := func(in []*fleetviewv1.ResourceEvent) []feed.Event {
				var out []feed.Event
				for _, e := range in {
					seq++
					out = append(out, feed.Event{Seq: seq, Event: e})
				}
				return out
			}
			b0, b1, b2 := events(base), events(tc.first), events(tc.after)

			want, err := Open(Options{Dir: t.TempDir(), History: h})
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			for _, b := range [][]feed.Event{b0, b1, b2} {
				if err := want.Apply(ctx, "c1", b, b[len(b)-1].Seq); err != nil {
					t.Fatal(err)
				}
			}

			got, err := Open(Options{Dir: t.TempDir(), History: h})
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			if err := got.Apply(ctx, "c1", b0, b0[len(b0)-1].Seq); err != nil {
				t.Fatal(err)
			}
			w1, err := got.newWriter(ctx, "c1", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The sequential apply told the priors; the pipelined one
			// must tell the same.
			wantPriors := fmtPriors(b1) + fmtPriors(b2)
			if got := fmtPriors(b2); got != tc.priors {
				t.Errorf("priors of the second batch %s, want %s", got, tc.priors)
			}
			for _, b := range [][]feed.Event{b1, b2} {
				for i := range b {
					b[i].Prior = feed.Prior{}
				}
			}
			for i := range b1 {
				if err := w1.apply(&b1[i]); err != nil {
					t.Fatal(err)
				}
			}
			// w2's snapshot is taken before w1 commits.
			w2, err := got.newWriter(ctx, "c1", w1.ov, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range b2 {
				if err := w2.apply(&b2[i]); err != nil {
					t.Fatal(err)
				}
			}
			if got := fmtPriors(b1) + fmtPriors(b2); got != wantPriors {
				t.Errorf("pipelined priors %s, sequential %s", got, wantPriors)
			}
			if err := w1.commit(b1[len(b1)-1].Seq); err != nil {
				t.Fatal(err)
			}
			if err := w2.commit(b2[len(b2)-1].Seq); err != nil {
				t.Fatal(err)
			}
			if g, w := dump(t, got), dump(t, want); g != w {
				t.Fatalf("store differs from sequential apply:\ngot:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

// TestPrepareCommitsInOrder drives Prepare and Commit the way the
// materializer does, over many batches that update the same objects, and
// checks the store equals sequential application.
func TestPrepareCommitsInOrder(t *testing.T) { withAndWithoutHistory(t, testPrepareCommitsInOrder) }

func testPrepareCommitsInOrder(t *testing.T, h HistoryOptions) {
	ctx := context.Background()
	want, err := Open(Options{Dir: t.TempDir(), History: h})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := Open(Options{Dir: t.TempDir(), History: h})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	var seq uint64
	var inflight <-chan error
	for round := range 40 {
		var b []feed.Event
		for i := range 20 {
			seq++
			e := relabeled(i, round+2, fmt.Sprint(round%3))
			if (i+round)%7 == 0 {
				e = benchdata.Delete("c1", i, round+2)
			}
			b = append(b, feed.Event{Seq: seq, Event: e})
		}
		if err := want.Apply(ctx, "c1", b, seq); err != nil {
			t.Fatal(err)
		}
		wantPriors := fmtPriors(b)
		b = slices.Clone(b)
		for i := range b {
			b[i].Prior = feed.Prior{}
		}
		p, err := got.Prepare(ctx, "c1", b, seq)
		if err != nil {
			t.Fatal(err)
		}
		if g := fmtPriors(b); g != wantPriors {
			t.Fatalf("round %d: prepared priors %s, sequential %s", round, g, wantPriors)
		}
		if inflight != nil {
			if err := <-inflight; err != nil {
				t.Fatal(err)
			}
		}
		inflight = p.Commit()
	}
	if err := <-inflight; err != nil {
		t.Fatal(err)
	}
	if g, w := dump(t, got), dump(t, want); g != w {
		t.Fatalf("store differs from sequential apply:\ngot:\n%.3000s\nwant:\n%.3000s", g, w)
	}
}

// TestReopenedStoreLooksUpPreviousObjects: the filter of written keys only
// vouches for streams this process wrote from empty; after a restart, a
// label change must still find and remove the previous labels.
func TestReopenedStoreLooksUpPreviousObjects(t *testing.T) {
	ctx := context.Background()
	s := reopenedWithPod0(t, nil)
	p, err := s.Prepare(ctx, "c1", []feed.Event{{Seq: 2, Event: relabeled(0, 2, "x")}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-p.Commit(); err != nil {
		t.Fatal(err)
	}
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	// Lists re-check labels, so look at the index itself.
	if d := dump(t, s); strings.Contains(d, `\x00tier\x00frontend\x00`) {
		t.Fatalf("stale label index entry after restart:\n%s", d)
	}
	if got := fmtList(names(t, r, "tier=frontend")); got != "[]" {
		t.Fatalf("list after restart: %s", got)
	}
	if got := fmtList(names(t, r, "tier=x-frontend")); got != "[c1/"+benchdata.PodName(0)+"]" {
		t.Fatalf("new label entry: %s", got)
	}
}

// TestRemovalLargerThanATransaction: removing a resource whose objects do
// not fit one Badger transaction (small memtables make that cheap to reach)
// commits in parts and removes everything, label index and counters
// included; so does the pipelined path, which falls back to Apply for it.
func TestRemovalLargerThanATransaction(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(Options{Dir: t.TempDir(), MemTableSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var seq uint64
			for from := 0; from < 3000; from += 200 {
				var b []feed.Event
				for i := from; i < from+200; i++ {
					seq++
					b = append(b, feed.Event{Seq: seq, Event: benchdata.Event("c1", i, 1)})
				}
				if err := s.Apply(ctx, "c1", b, seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Apply(ctx, "c2", []feed.Event{{Seq: 1, Event: benchdata.Event("c2", 0, 1)}}, 1); err != nil {
				t.Fatal(err)
			}
			seq++
			removal := []feed.Event{{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: stream.ProtoGVR(benchdata.PodGVR), Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}}}
			if pipelined {
				p, err := s.Prepare(ctx, "c1", removal, seq)
				if err != nil {
					t.Fatal(err)
				}
				err = <-p.Commit()
				if err != nil {
					t.Fatal(err)
				}
			} else if err := s.Apply(ctx, "c1", removal, seq); err != nil {
				t.Fatal(err)
			}
			d := dump(t, s)
			// Every key of c1 but its checkpoint ("c\x00c1") must be gone.
			if n := strings.Count(d, `\x00c1"=`) - 1 + strings.Count(d, `"u\x00c1\x00`); n != 0 {
				t.Fatalf("%d keys of c1 left after removal", n)
			}
			if !strings.Contains(d, `\x00c2"`) {
				t.Fatal("c2's object went too")
			}
			checkRecount(t, s) // the removal zeroed c1's counters over its parts
			if c, _ := s.Checkpoint(ctx, "c1"); c != seq {
				t.Fatalf("checkpoint %d, want %d", c, seq)
			}
		})
	}
}
