package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// BenchmarkHistoryAsOfDeep reads the past of 500 Pods changed 128 times
// each since (one-label changes, one round of every Pod a second): what
// the whole-state policy (chainCost) costs a read, whose chain of
// reverse patches runs from the revision in force at the as-of time to
// the next whole state or the newest. "get/first": one Pod as of before
// its first change (the longest chain: 127 patches with a whole state
// at most every 128th revision, 15 with one every 16th); "get/each": one
// Pod as of each of its 129 states in turn, by a stride (the mean); "list/first":
// the 500 Pods as of before their first change, each rebuilt.
func BenchmarkHistoryAsOfDeep(b *testing.B) {
	const pods, changes = 500, 128
	s, r := openHistory(b, HistoryOptions{})
	ctx := context.Background()
	start := time.Now().Add(-30 * time.Minute)
	if err := s.db.Update(func(txn *bdg.Txn) error {
		return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(start.Add(-time.Minute).UnixNano())))
	}); err != nil {
		b.Fatal(err)
	}
	at := func(c int) time.Time { return start.Add(time.Duration(c) * time.Second) }
	seq := uint64(0)
	evs := make([]feed.Event, 0, pods)
	for c := 0; c <= changes; c++ {
		evs = evs[:0]
		for i := range pods {
			e := benchdata.Event("c1", i, 1)
			if c > 0 {
				rv := fmt.Sprint(c + 1)
				e.Object = bytes.Replace(e.Object, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
				e.Object = bytes.Replace(e.Object, []byte(`"resourceVersion":"1"`), []byte(`"resourceVersion":"`+rv+`"`), 1)
				e.ResourceVersion = rv
			}
			e.ObservedUnixNano = at(c).UnixNano()
			seq++
			evs = append(evs, feed.Event{Seq: seq, Event: e})
		}
		if err := s.Apply(ctx, "c1", evs, seq); err != nil {
			b.Fatal(err)
		}
	}
	e := benchdata.Event("c1", 7, 1)
	get := query.GetOptions{GVR: benchdata.PodGVR, Cluster: "c1", Namespace: e.GetNamespace(), Name: e.GetName()}
	cpu := func(b *testing.B, f func(i int)) {
		cpu0 := processCPU(b)
		b.ResetTimer()
		for i := range b.N {
			f(i)
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
	b.Run("get/first", func(b *testing.B) {
		o := get
		o.AsOf = at(0).Add(time.Millisecond)
		cpu(b, func(int) {
			if obj, err := r.Get(ctx, o); err != nil || !bytes.Equal(obj.JSON, e.GetObject()) {
				b.Fatalf("%s, %v", obj.JSON, err)
			}
		})
	})
	b.Run("get/each", func(b *testing.B) {
		cpu(b, func(i int) {
			o := get
			// A stride prime to 129: any run of iterations spreads over
			// the states, 129 of them visit each once.
			o.AsOf = at(i * 37 % (changes + 1)).Add(time.Millisecond)
			if _, err := r.Get(ctx, o); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("list/first", func(b *testing.B) {
		o := query.ListOptions{GVR: benchdata.PodGVR, AsOf: at(0).Add(time.Millisecond)}
		cpu(b, func(int) {
			p, err := r.List(ctx, o)
			if err != nil || len(p.Items) != pods {
				b.Fatalf("%d items, %v", len(p.Items), err)
			}
		})
	})
}
