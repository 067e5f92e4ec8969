package opensearch

import (
	"io"
	"log/slog"
	"testing"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkUpsertItem is the CPU of building one Pod's bulk item, with
// the count and relation fields (withEdges) and the same item without
// them (indexFields skipped), side by side: what keeping them adds to
// the store's side of an apply (the bulk request and OpenSearch's
// indexing come on top of both).
func BenchmarkUpsertItem(b *testing.B) {
	s, err := Open(Options{Addresses: []string{"http://127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	evs := make([]feed.Event, 256)
	for i := range evs {
		evs[i] = feed.Event{Seq: uint64(i + 1), Event: benchdata.Event("c1", i, 1)}
	}
	gvr := stream.GVR(evs[0].Event.GetGvr())
	for _, tc := range []struct {
		name string
		skip bool
	}{{"withEdges", false}, {"withoutEdges", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s.skipIndexFields = tc.skip
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.upsertItem("c1", gvr, evs[i%len(evs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
