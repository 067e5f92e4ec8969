package badger

import (
	"context"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkHistoryUpdate applies updates of 5,000 Pods (every one at the
// next resourceVersion) through the pipelined path, with history off and
// on: the history's cost per update on the write path (and, as adds/s,
// per add: the first round, timed alone, into an empty store).
func BenchmarkHistoryUpdate(b *testing.B) {
	const pods, batch = 5000, 1000
	for _, tc := range []struct {
		name string
		h    HistoryOptions
	}{
		{"off", HistoryOptions{}},
		{"on", HistoryOptions{Retention: time.Hour, MaxBytes: 1 << 40, RetainInterval: time.Hour}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), History: tc.h, ValueLogGCInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			seq := uint64(0)
			round := func(rv int) {
				var inflight <-chan error
				for i := 0; i < pods; i += batch {
					evs := make([]feed.Event, batch)
					for j := range evs {
						seq++
						evs[j] = feed.Event{Seq: seq, Event: benchdata.Event("c1", i+j, rv)}
					}
					p, err := s.Prepare(ctx, "c1", evs, seq)
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
			start := time.Now()
			round(1) // the adds
			adds := float64(pods) / time.Since(start).Seconds()
			b.ResetTimer()
			for i := range b.N {
				round(i + 2)
			}
			b.ReportMetric(float64(b.N*pods)/b.Elapsed().Seconds(), "updates/s")
			b.ReportMetric(adds, "adds/s")
		})
	}
}

// BenchmarkHistoryRevisions reads one Pod's 101 revisions (the store's
// part of issue #48's "an object's 100 revisions <= 10 ms"): from its
// current record back through the reverse patches.
func BenchmarkHistoryRevisions(b *testing.B) {
	s, r := openHistory(b, HistoryOptions{})
	ctx := context.Background()
	const revs = 101
	for rv := 1; rv <= revs; rv++ {
		e := benchdata.Event("c1", 0, rv)
		if err := s.Apply(ctx, "c1", []feed.Event{{Seq: uint64(rv), Event: e}}, uint64(rv)); err != nil {
			b.Fatal(err)
		}
	}
	e := benchdata.Event("c1", 0, 1)
	o := query.RevisionsOptions{Object: query.GetOptions{GVR: benchdata.PodGVR, Cluster: "c1", Namespace: e.GetNamespace(), Name: e.GetName()}}
	b.ResetTimer()
	for range b.N {
		p, err := r.Revisions(ctx, o)
		if err != nil || len(p.Revisions) != revs {
			b.Fatalf("%d revisions, %v", len(p.Revisions), err)
		}
	}
}
