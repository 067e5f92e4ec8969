package badger

import (
	"bytes"
	"context"
	"errors"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func ev(seq uint64, e *fleetviewv1.ResourceEvent) materializer.Event {
	return materializer.Event{Seq: seq, Event: e}
}

func names(t *testing.T, r *Reader, sel string) []string {
	t.Helper()
	s, err := labels.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.List(context.Background(), query.ListOptions{GVR: benchdata.PodGVR, Labels: s})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range p.Items {
		k := bytes.Index(o.JSON, []byte(`"name":"`))
		e := bytes.IndexByte(o.JSON[k+8:], '"')
		out = append(out, o.Cluster+"/"+string(o.JSON[k+8:k+8+e]))
	}
	return out
}

func TestApply(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	ctx := context.Background()
	p0, p1, p2 := benchdata.PodName(0), benchdata.PodName(1), benchdata.PodName(2)

	// Upserts, a label change, and a deleted-and-recreated object whose
	// new uid arrives before the old uid's tombstone.
	moved := benchdata.Event("c1", 1, 2)
	moved.Object = bytes.Replace(moved.Object, []byte(`"tier":"backend"`), []byte(`"tier":"moved"`), 1)
	re := benchdata.Event("c1", 2, 5)
	re.Uid = "new-uid"
	re.Object = bytes.Replace(re.Object, []byte(benchdata.UID("c1", 2)), []byte("new-uid"), 1)
	if err := s.Apply(ctx, "c1", []materializer.Event{
		ev(1, benchdata.Event("c1", 0, 1)), ev(2, benchdata.Event("c1", 1, 1)), ev(3, benchdata.Event("c1", 2, 1)),
		ev(4, moved), ev(5, re), ev(6, benchdata.Delete("c1", 2, 6)),
	}, 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, "c2", []materializer.Event{ev(1, benchdata.Event("c2", 0, 1))}, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sel, want string }{
		{"", "[c1/" + p0 + " c2/" + p0 + " c1/" + p1 + " c1/" + p2 + "]"},
		{"tier=moved", "[c1/" + p1 + "]"},
		{"tier=backend", "[]"},
		{"tier=frontend", "[c1/" + p0 + " c2/" + p0 + " c1/" + p2 + "]"},
	} {
		if got := names(t, r, tc.sel); fmtList(got) != tc.want {
			t.Errorf("list %q = %s, want %s", tc.sel, fmtList(got), tc.want)
		}
	}
	o, err := r.Get(ctx, benchdata.PodGVR, benchdata.Namespace(2), p2, "c1")
	if err != nil || !bytes.Contains(o.JSON, []byte("new-uid")) {
		t.Fatalf("recreated object: %v %.100s", err, o.JSON)
	}
	if c, _ := s.Checkpoint(ctx, "c1"); c != 6 {
		t.Fatalf("checkpoint = %d", c)
	}

	// A poison object is reported with its sequence and nothing of the
	// batch is committed.
	bad := benchdata.Event("c1", 9, 1)
	bad.Object = []byte(`{"metadata":`)
	err = s.Apply(ctx, "c1", []materializer.Event{ev(7, benchdata.Event("c1", 8, 1)), ev(8, bad)}, 8)
	var pe *materializer.PoisonError
	if !errors.As(err, &pe) || pe.Seq != 8 || !errors.Is(err, materializer.ErrPoison) {
		t.Fatalf("poison: %v", err)
	}
	if c, _ := s.Checkpoint(ctx, "c1"); c != 6 {
		t.Fatalf("checkpoint after a refused batch = %d", c)
	}

	// Removing the resource in c1 leaves c2 alone.
	if err := s.Apply(ctx, "c1", []materializer.Event{ev(9, &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: stream.ProtoGVR(benchdata.PodGVR),
		Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED})}, 9); err != nil {
		t.Fatal(err)
	}
	if got := fmtList(names(t, r, "")); got != "[c2/"+p0+"]" {
		t.Fatalf("after removal: %s", got)
	}
	if got := fmtList(names(t, r, "tier=frontend")); got != "[c2/"+p0+"]" {
		t.Fatalf("label index after removal: %s", got)
	}
}

func fmtList(s []string) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	b.WriteByte(']')
	return b.String()
}

// TestApplyAsyncMatchesApply hands batches over without waiting (batch N+1
// built while N commits, reading N's labels from the overlay) and checks
// the store ends equal to one written batch by batch.
func TestApplyAsyncMatchesApply(t *testing.T) {
	var batches [][]materializer.Event
	seq := uint64(0)
	next := func(e *fleetviewv1.ResourceEvent) materializer.Event {
		seq++
		return ev(seq, e)
	}
	for round := 0; round < 6; round++ {
		var b []materializer.Event
		for i := 0; i < 40; i++ {
			e := benchdata.Event("c1", i, round+1)
			if round%2 == 1 && i%3 == 0 {
				e.Object = bytes.Replace(e.Object, []byte(`"shard":"s`), []byte(`"shard":"r`+string(rune('0'+round))), 1)
			}
			b = append(b, next(e))
		}
		if round == 3 {
			b = append(b, next(benchdata.Delete("c1", 5, 99)))
		}
		batches = append(batches, b)
	}
	ctx := context.Background()
	open := func() (*Store, *Reader) {
		s, err := Open(Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		r := s.Reader(ReaderOptions{})
		t.Cleanup(func() { r.Close(); s.Close() })
		return s, r
	}
	syncS, syncR := open()
	asyncS, asyncR := open()
	var waits []func() error
	for _, b := range batches {
		if err := syncS.Apply(ctx, "c1", b, b[len(b)-1].Seq); err != nil {
			t.Fatal(err)
		}
		w, err := asyncS.ApplyAsync(ctx, "c1", b, b[len(b)-1].Seq)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	for _, w := range waits {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
	for _, sel := range []string{"", "shard=s0", "shard=r5", "shard=r1", "shard in (r3,s3)", "app=web", "!shard"} {
		if a, b := fmtList(names(t, syncR, sel)), fmtList(names(t, asyncR, sel)); a != b {
			t.Errorf("list %q: batch by batch %s, pipelined %s", sel, a, b)
		}
	}
	// Reads filter stale index entries, so compare the index itself: a
	// label change read from a stale snapshot would leave entries behind.
	if a, b := dumpKeys(t, syncS), dumpKeys(t, asyncS); a != b {
		t.Errorf("keys differ:\nbatch by batch:\n%s\npipelined:\n%s", a, b)
	}
	if a, _ := syncS.Checkpoint(ctx, "c1"); a != seq {
		t.Fatalf("checkpoint %d, want %d", a, seq)
	}
	if b, _ := asyncS.Checkpoint(ctx, "c1"); b != seq {
		t.Fatalf("pipelined checkpoint %d, want %d", b, seq)
	}
}

// dumpKeys lists every object, label-index and uid key.
func dumpKeys(t *testing.T, s *Store) string {
	t.Helper()
	var b bytes.Buffer
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			b.Write(bytes.ReplaceAll(it.Item().Key(), []byte{0}, []byte{'|'}))
			b.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
