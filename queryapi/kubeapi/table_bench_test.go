package kubeapi

import (
	"fmt"
	"io"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

// BenchmarkPage compares a page of 500 stored Pods written as kubectl's
// Table (includeObject=Metadata) with the same page as a PodList: the
// Table's extra cost per row is what the query benchmark's paged Table
// row measures end to end; with the row spans the store found when it
// stored each object, a row reads no metadata.
func BenchmarkPage(b *testing.B) {
	const n = 500
	items, cells := make([][]byte, n), make([][]byte, n)
	for i := range items {
		items[i] = podjson.Pod("member1", i, 7)
		cells[i] = fmt.Appendf(nil, `[%q,"1/1","Running","0","3h","10.244.0.%d","node-%03d"]`, podjson.PodName(i), i%256, i%200)
	}
	c := cached{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true, columns: podColumns}
	lm := metav1.ListMeta{ResourceVersion: "fv2.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
	h := &Handler{}
	spans := make([]uint32, 0, 8*n)
	for _, it := range items {
		r, err := rawjson.FindRowSpans(it, clusterAnnotation)
		if err != nil {
			b.Fatal(err)
		}
		spans = r.Offsets(spans)
	}
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			if err := writeList(io.Discard, c, lm, items); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("table", func(b *testing.B) {
		for b.Loop() {
			if err := h.writeTable(io.Discard, c, lm, metav1.IncludeMetadata, items, cells, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The row spans the Badger store keeps beside each object.
	b.Run("table with row spans", func(b *testing.B) {
		for b.Loop() {
			if err := h.writeTable(io.Discard, c, lm, metav1.IncludeMetadata, items, cells, spans); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListEncoding compares a list of 1,000 stored Pods written as
// JSON (the stored bytes, spliced) with the same list in protobuf (each
// Pod decoded from JSON with client-go's scheme, then encoded): what a
// protobuf client costs the hub per list.
func BenchmarkListEncoding(b *testing.B) {
	const n = 1000
	items := make([][]byte, n)
	for i := range items {
		items[i] = podjson.Pod("member1", i, 7)
	}
	c := cached{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true}
	lm := metav1.ListMeta{ResourceVersion: "fv2.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
	h := New(nil, nil, nil, nil)
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := writeList(io.Discard, c, lm, items); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			list, err := h.proto.list(c, lm, items, func(_ []byte, err error) { b.Fatal(err) })
			if err != nil {
				b.Fatal(err)
			}
			if err := h.proto.writeList(io.Discard, list); err != nil {
				b.Fatal(err)
			}
		}
	})
}
