package badger

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// benchPods is small enough for a shared 2-core machine yet large enough
// that per-item costs, not per-call setup, dominate allocs/op. Profiles of
// the read path at the query benchmark's scale set it to 75000 (150k Pods
// in the LSM tree's tables, not only its memtables); the events are applied
// in transactions of 1000 so that any size fits Badger's limit.
const benchPods = 3000

func benchReader(b *testing.B) *Reader { return benchReaderOf(b, false) }

// benchReaderOf is benchReader; flushed: the store is closed and opened
// again after the adds, so the reads find the keys in tables on disk
// (through the block cache, and for a compressed table its
// decompression), not in memtables.
func benchReaderOf(b *testing.B, flushed bool) *Reader {
	b.Helper()
	o := Options{Dir: b.TempDir()}
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []string{"c1", "c2"} {
		evs := make([]feed.Event, benchPods)
		for i := range evs {
			evs[i] = ev(uint64(i+1), benchdata.Event(c, i, 1))
		}
		for i := 0; i < benchPods; i += 1000 {
			j := min(i+1000, benchPods)
			if err := s.Apply(context.Background(), c, evs[i:j], uint64(j)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if flushed {
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if s, err = Open(o); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { s.Close() })
	r := s.Reader(ReaderOptions{})
	b.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkReads guards the read paths against per-item allocations: each
// op reads every page of one list or search.
func BenchmarkReads(b *testing.B) { benchReads(b, benchReader(b)) }

// BenchmarkReadsFlushed is BenchmarkReads from tables on disk
// (benchReaderOf): what the LSM's block compression changes
// (docs/benchmarks/history.md).
func BenchmarkReadsFlushed(b *testing.B) { benchReads(b, benchReaderOf(b, true)) }

func benchReads(b *testing.B, r *Reader) {
	ctx := context.Background()
	web, _ := labels.Parse("app=web")
	tier, _ := labels.Parse("tier!=frontend")
	cases := []struct {
		name   string
		list   *query.ListOptions
		search *query.SearchOptions
		// reuse: the pages are read as a streamed answer reads them, each
		// written (query.Reuse.Written) before the next is read.
		reuse bool
	}{
		{name: "List/all", list: &query.ListOptions{}},
		{name: "List/paged500", list: &query.ListOptions{Limit: 500}},
		{name: "List/paged500reused", list: &query.ListOptions{Limit: 500}, reuse: true},
		{name: "List/labelIndex", list: &query.ListOptions{Labels: web}},
		{name: "List/labelIndexPaged100", list: &query.ListOptions{Labels: web, Limit: 100}},
		{name: "List/labelIndexPaged100reused", list: &query.ListOptions{Labels: web, Limit: 100}, reuse: true},
		{name: "List/labelScan", list: &query.ListOptions{Labels: tier, Limit: 500}},
		{name: "List/oneCluster", list: &query.ListOptions{Clusters: []string{"c2"}, Limit: 500}},
		{name: "Search/paged100", search: &query.SearchOptions{Text: "web-00001", Limit: 100}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if tc.list != nil {
					o := *tc.list
					o.GVR = benchdata.PodGVR
					if tc.reuse {
						o.Reuse = &query.Reuse{}
					}
					for {
						p, err := r.List(ctx, o)
						if err != nil {
							b.Fatal(err)
						}
						o.Reuse.Written()
						if o.Continue = p.Continue; o.Continue == "" {
							break
						}
					}
					continue
				}
				o := *tc.search
				for {
					p, err := r.Search(ctx, o)
					if err != nil {
						b.Fatal(err)
					}
					if o.Continue = p.Continue; o.Continue == "" {
						break
					}
				}
			}
		})
	}
}
