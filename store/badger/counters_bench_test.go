package badger

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkCountersRead measures a count by cluster x status.phase from
// the counters of 3 x 5,000 Pods, on a store where each counter was
// written once (one batch per cluster) beside one where every counter was
// rewritten by 50 batches (batches of 100, then two passes of updates
// that move every Pod's phase), as a hub's store holds them until
// compaction drops the older versions.
func BenchmarkCountersRead(b *testing.B) {
	const clusters, per = 3, 5000
	for _, c := range []struct {
		name   string
		batch  int
		passes int
	}{{"written once", per, 1}, {"rewritten by 150 batches", 100, 3}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), ValueLogGCInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			seq := map[string]uint64{}
			for pass := range c.passes {
				for cl := range clusters {
					cluster := fmt.Sprint("c", cl)
					var evs []feed.Event
					for i := range per {
						seq[cluster]++
						evs = append(evs, feed.Event{Seq: seq[cluster], Event: countPod(cluster, i, 1+pass)})
						if len(evs) == c.batch || i == per-1 {
							if err := s.Apply(context.Background(), cluster, evs, seq[cluster]); err != nil {
								b.Fatal(err)
							}
							evs = nil
						}
					}
				}
			}
			r := s.Reader(ReaderOptions{})
			defer r.Close()
			o := query.CountOptions{GVR: benchdata.PodGVR, By: dims(b, "cluster", "field:status.phase")}
			b.ResetTimer()
			for range b.N {
				got, err := r.Count(context.Background(), o)
				if err != nil {
					b.Fatal(err)
				}
				if got.Scanned != "counters" || got.Total != clusters*per {
					b.Fatalf("scanned %q total %d", got.Scanned, got.Total)
				}
			}
		})
	}
}
