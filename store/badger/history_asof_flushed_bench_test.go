package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// BenchmarkHistoryAsOfListFlushed is BenchmarkHistoryAsOfList's "each"
// (15,000 Pods, every one changed once since the as-of time, every
// fiftieth deleted, all selected) read from a store closed and opened
// again: its keys in tables on disk, not in memtables, as a hub's are
// after a while (bench-historyapi's), where a seek positions an
// iterator in every table and level and a point read passes most by
// their bloom filters. The change is a new status ("status": the
// reverse patch's last member is the Pod's last) or a label added
// ("relabel", as bench-historyapi's churn: the patch ends in the
// metadata).
func BenchmarkHistoryAsOfListFlushed(b *testing.B) {
	relabeled := func(i int) *fleetviewv1.ResourceEvent {
		e := benchdata.Event("c1", i, 1)
		e.ResourceVersion = "2"
		e.Object = bytes.Replace(e.Object, []byte(`"resourceVersion":"1"`), []byte(`"resourceVersion":"2"`), 1)
		e.Object = bytes.Replace(e.Object, []byte(`"labels":{`), []byte(`"labels":{"churned":"yes",`), 1)
		return e
	}
	for _, change := range []struct {
		name  string
		event func(i int) *fleetviewv1.ResourceEvent
	}{
		{"status", func(i int) *fleetviewv1.ResourceEvent { return benchdata.Event("c1", i, 2) }},
		{"relabel", relabeled},
	} {
		b.Run(change.name, func(b *testing.B) { asOfListFlushed(b, change.event) })
	}
}

func asOfListFlushed(b *testing.B, changed func(i int) *fleetviewv1.ResourceEvent) {
	const pods = 15000
	dir := b.TempDir()
	opts := Options{Dir: dir, History: HistoryOptions{Retention: 24 * time.Hour, MaxBytes: 1 << 30, RetainInterval: -1}, ValueLogGCInterval: -1}
	s, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.db.Update(func(txn *bdg.Txn) error {
		return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(time.Now().Add(-time.Hour).UnixNano())))
	}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	seq := uint64(0)
	var evs []feed.Event
	apply := func() {
		for i := 0; i < len(evs); i += 1000 {
			part := evs[i:min(i+1000, len(evs))]
			if err := s.Apply(ctx, "c1", part, part[len(part)-1].Seq); err != nil {
				b.Fatal(err)
			}
		}
		evs = evs[:0]
	}
	for i := range pods {
		seq++
		evs = append(evs, feed.Event{Seq: seq, Event: benchdata.Event("c1", i, 1)})
	}
	apply()
	asOf := time.Now()
	for i := range pods {
		seq++
		evs = append(evs, feed.Event{Seq: seq, Event: changed(i)})
	}
	for i := 25; i < pods; i += 50 {
		seq++
		evs = append(evs, feed.Event{Seq: seq, Event: benchdata.Delete("c1", i, 3)})
	}
	apply()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s, err = Open(opts); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	sel, err := labels.Parse("tier")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR}); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		at   time.Time
	}{{"today", time.Time{}}, {"asOf", asOf}} {
		b.Run(tc.name, func(b *testing.B) {
			o := query.ListOptions{GVR: benchdata.PodGVR, Labels: sel, AsOf: tc.at}
			cpu0 := processCPU(b)
			for range b.N {
				p, err := r.List(ctx, o)
				if err != nil || len(p.Items) < pods-pods/50-1 {
					b.Fatalf("%d items, %v", len(p.Items), err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}
