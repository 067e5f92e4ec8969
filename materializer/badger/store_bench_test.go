package badger

import (
	"context"
	"testing"

	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/benchdata"
)

// BenchmarkApply measures applying fresh Pod upserts (about 3 KB each) in
// batches of 1000, the materializer's default, into an empty store.
func BenchmarkApply(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	evs := make([]materializer.Event, batch)
	b.SetBytes(int64(len(benchdata.Pod("c1", 0, 1))))
	b.ResetTimer()
	seq := uint64(0)
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		b.StopTimer()
		for j := 0; j < n; j++ {
			seq++
			evs[j] = materializer.Event{Seq: seq, Event: benchdata.Event("c1", i+j, 1)}
		}
		b.StartTimer()
		if err := s.Apply(context.Background(), "c1", evs[:n], seq); err != nil {
			b.Fatal(err)
		}
	}
}
