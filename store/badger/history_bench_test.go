package badger

import (
	"context"
	"syscall"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
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
		{"on", HistoryOptions{Retention: time.Hour, MaxBytes: 1 << 40, RetainInterval: -1}},
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

// BenchmarkHistoryAsOfList lists the 3,000 Pods of 6,000 a label selects
// (tier=frontend, the label index's range) today and as of a time before
// the last changes (the store's part of issue #48's "an as-of list of 15k
// selected Pods <= 2x today's list of the same"): "few" after 100 edits
// of one Pod (bench-historyapi's case), "churn" after an edit of every
// tenth Pod, a delete of every fiftieth and 100 new ones, "others" after
// the same 100 edits as "few" and 20,000 changes of another resource in
// another cluster, which the as-of list of Pods should not pay for, and
// "all" after two edits of every Pod (issue #48's churn: 1k changes/s for
// 10 minutes touch nearly every one of 150k Pods, four times on average),
// so every Pod of the list is rebuilt; "all/tenth" the same selecting a
// tenth (shard=s3), as the 15k Pods of 150k.
func BenchmarkHistoryAsOfList(b *testing.B) {
	for _, name := range []string{"few", "churn", "others", "all", "each"} {
		pods := 6000
		if name == "each" {
			pods = 15000 // the and bench-historyapi's scale
		}
		churn := name == "churn"
		s, r := openHistory(b, HistoryOptions{})
		ctx := context.Background()
		seq := uint64(0)
		applyAll := func(evs []feed.Event) {
			for i := 0; i < len(evs); i += 1000 {
				part := evs[i:min(i+1000, len(evs))]
				if err := s.Apply(ctx, "c1", part, part[len(part)-1].Seq); err != nil {
					b.Fatal(err)
				}
			}
		}
		next := func(e *fleetviewv1.ResourceEvent) feed.Event {
			seq++
			return feed.Event{Seq: seq, Event: e}
		}
		var evs []feed.Event
		for i := range pods {
			evs = append(evs, next(benchdata.Event("c1", i, 1)))
		}
		applyAll(evs)
		asOf := time.Now()
		evs = evs[:0]
		if churn {
			for i := 0; i < pods; i += 10 {
				evs = append(evs, next(benchdata.Event("c1", i, 2)))
			}
			for i := 5; i < pods; i += 50 {
				evs = append(evs, next(benchdata.Delete("c1", i, 3)))
			}
			for i := pods; i < pods+100; i++ {
				evs = append(evs, next(benchdata.Event("c1", i, 1)))
			}
		} else if name == "all" {
			for rv := 2; rv <= 3; rv++ {
				for i := range pods {
					evs = append(evs, next(benchdata.Event("c1", i, rv)))
				}
			}
		} else if name == "each" {
			// The API benchmark's churn (bench-historyapi,
			// FV_HIST_CHURN_EVERY=1): every Pod changed once since, every
			// fiftieth deleted, every Pod selected.
			for i := range pods {
				evs = append(evs, next(benchdata.Event("c1", i, 2)))
			}
			for i := 25; i < pods; i += 50 {
				evs = append(evs, next(benchdata.Delete("c1", i, 3)))
			}
		} else {
			for rv := 2; rv <= 101; rv++ {
				evs = append(evs, next(benchdata.Event("c1", 0, rv)))
			}
		}
		applyAll(evs)
		if name == "others" {
			applyOthers(b, s, "c2", 5000, 4)
		}
		if _, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR}); err != nil {
			b.Fatal(err) // the first list reads the value log cold: neither case pays it
		}
		selectors := []struct{ name, sel string }{{"", "tier=frontend"}}
		if name == "each" {
			selectors[0].sel = "tier"
		}
		if name == "all" {
			// A tenth selected: the 15k of 150k.
			selectors = append(selectors, struct{ name, sel string }{"/tenth", "shard=s3"})
		}
		for _, sc := range selectors {
			sel, err := labels.Parse(sc.sel)
			if err != nil {
				b.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				at   time.Time
			}{{"today", time.Time{}}, {"asOf", asOf}} {
				b.Run(name+sc.name+"/"+tc.name, func(b *testing.B) {
					o := query.ListOptions{GVR: benchdata.PodGVR, Labels: sel, AsOf: tc.at}
					cpu0 := processCPU(b)
					for range b.N {
						p, err := r.List(ctx, o)
						if err != nil || len(p.Items) < pods/10-200 {
							b.Fatalf("%d items, %v", len(p.Items), err)
						}
					}
					// On a loaded shared machine the process's CPU time
					// per list moves far less than its wall time.
					b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
				})
			}
		}
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// applyOthers applies rounds changes of n objects of a resource other
// than Pods (ConfigMaps carrying a Pod's bytes) in cluster.
func applyOthers(b *testing.B, s *Store, cluster string, n, rounds int) {
	b.Helper()
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	seq := uint64(0)
	for rv := 1; rv <= rounds; rv++ {
		for i := 0; i < n; i += 1000 {
			var evs []feed.Event
			for j := i; j < min(i+1000, n); j++ {
				e := benchdata.Event(cluster, j, rv)
				e.Gvr, e.Kind = stream.ProtoGVR(cm), "ConfigMap"
				seq++
				evs = append(evs, feed.Event{Seq: seq, Event: e})
			}
			if err := s.Apply(context.Background(), cluster, evs, seq); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHistoryIndexChanged rebuilds the change index (H/) of a store
// holding 20,000 changes (10,000 Pods added, then each updated), as an
// open does once for a store kept with the time-first D/ index: H/
// dropped and made again from the change feed (t/).
func BenchmarkHistoryIndexChanged(b *testing.B) {
	const pods = 10000
	s, _ := openHistory(b, HistoryOptions{})
	ctx := context.Background()
	seq := uint64(0)
	for rv := 1; rv <= 2; rv++ {
		for i := 0; i < pods; i += 1000 {
			var evs []feed.Event
			for j := i; j < i+1000; j++ {
				seq++
				evs = append(evs, feed.Event{Seq: seq, Event: benchdata.Event("c1", j, rv)})
			}
			if err := s.Apply(ctx, "c1", evs, seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		if err := s.db.Update(func(txn *bdg.Txn) error { return txn.Set(oldChangedIndexedKey, nil) }); err != nil {
			b.Fatal(err)
		}
		if err := s.indexChanged(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*2*pods)/b.Elapsed().Seconds(), "changes/s")
}
