package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// BenchmarkLoadRelations is an initial load: 15,000 benchdata Pods into an
// empty store, in batches of 1,000, with the relationship index and
// without it (what bench-relations' load ratio compares, without NATS or
// the reads). Opening, the events and closing are not timed. Profile one
// arm at a time: go test -bench 'LoadRelations/relations=true'
// -cpuprofile .... cpu-us/Pod is the process's CPU time (user and
// system, every goroutine: Badger's writer and the read-ahead workers
// too) over the timed part: on a shared machine the steadier figure.
func BenchmarkLoadRelations(b *testing.B) {
	const pods = 15000
	for _, with := range []bool{true, false} {
		b.Run(fmt.Sprintf("relations=%v", with), func(b *testing.B) {
			var cpu time.Duration
			for n := 0; n < b.N; n++ {
				b.StopTimer()
				s, err := Open(Options{Dir: b.TempDir(), NoRelations: !with, ValueLogGCInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				evs := make([]feed.Event, pods)
				for i := range evs {
					evs[i] = feed.Event{Seq: uint64(i + 1), Event: benchdata.Event("c1", i, 1)}
				}
				c0 := processCPU(b)
				b.StartTimer()
				for i := 0; i < pods; i += 1000 {
					if err := s.Apply(context.Background(), "c1", evs[i:i+1000], evs[i+999].Seq); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu += processCPU(b) - c0
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*pods), "us/Pod")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*pods), "cpu-us/Pod")
		})
	}
}
