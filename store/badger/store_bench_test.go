package badger

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkApply measures applying fresh Pod upserts (about 3 KB each) in
// batches of 1000, the materializer's default, into an empty store: the
// objects alone, and with the Table cells a member prints for a Pod (what
// storing cells, and finding each object's row spans, costs the apply).
func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		name  string
		cells bool
	}{{"objects", false}, {"with cells", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const batch = 1000
			evs := make([]feed.Event, batch)
			b.SetBytes(int64(len(benchdata.Pod("c1", 0, 1))))
			b.ResetTimer()
			seq := uint64(0)
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				b.StopTimer()
				for j := 0; j < n; j++ {
					seq++
					ev := benchdata.Event("c1", i+j, 1)
					if c.cells {
						ev.Cells = fmt.Appendf(nil, `[%q,"1/1","Running","0","3h","10.244.0.%d","node-%03d","<none>","<none>"]`, ev.Name, j%256, j%200)
					}
					evs[j] = feed.Event{Seq: seq, Event: ev}
				}
				b.StartTimer()
				if err := s.Apply(context.Background(), "c1", evs[:n], seq); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrepareCommit applies the same events the materializer's way:
// batch N+1 is prepared while batch N commits.
func BenchmarkPrepareCommit(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	b.SetBytes(int64(len(benchdata.Pod("c1", 0, 1))))
	b.ReportAllocs()
	var inflight <-chan error
	seq := uint64(0)
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		b.StopTimer()
		evs := make([]feed.Event, n)
		for j := range evs {
			seq++
			evs[j] = feed.Event{Seq: seq, Event: benchdata.Event("c1", i+j, 1)}
		}
		b.StartTimer()
		p, err := s.Prepare(context.Background(), "c1", evs, seq)
		if err != nil {
			b.Fatal(err)
		}
		if inflight != nil {
			if err := <-inflight; err != nil {
				b.Fatal(err)
			}
		}
		inflight = p.Commit()
	}
	if err := <-inflight; err != nil {
		b.Fatal(err)
	}
}
