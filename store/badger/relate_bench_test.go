package badger

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkApplyRelations applies 1,000 benchdata Pods (owner, ConfigMaps,
// ServiceAccount and Node references each) and then an update of each
// (relations unchanged), with the relationship index and without it.
func BenchmarkApplyRelations(b *testing.B) {
	for _, with := range []bool{true, false} {
		b.Run(fmt.Sprintf("relations=%v", with), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), NoRelations: !with, ValueLogGCInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var seq uint64
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				evs := make([]feed.Event, 1000)
				for i := range evs {
					seq++
					evs[i] = feed.Event{Seq: seq, Event: benchdata.Event("c1", i, n+1)}
				}
				if err := s.Apply(context.Background(), "c1", evs, seq); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
