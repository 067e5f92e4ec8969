package badger

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestListReuse: a list given a query.Reuse copies its pages into memory
// the caller has written and never into memory a page it still holds
// uses. Two pages read without Written between them are both intact when
// compared after the second (each object byte for byte the object of a
// list without Reuse); after Written the next page reuses their memory
// (the test, holding them against the contract, sees them overwritten);
// and every page's objects are the store's, on the scan (primary range)
// and the label index (parallel fetch workers) alike.
func TestListReuse(t *testing.T) {
	s, r := openReader(t)
	for _, c := range []string{"c1", "c2", "c3"} {
		fill(t, s, c, 0, 1500, 0)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name, sel string
		limit     int64
	}{
		{"scan", "", 400},
		{"label index", "shard=s3", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			o := query.ListOptions{GVR: benchdata.PodGVR, Labels: sel, Limit: tc.limit}
			// The reference: every page without Reuse, its objects the
			// caller's to keep.
			var want []query.Object
			for ro := o; ; {
				p, err := r.List(ctx, ro)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, p.Items...)
				if ro.Continue = p.Continue; ro.Continue == "" {
					break
				}
			}
			if int64(len(want)) < 4*tc.limit {
				t.Fatalf("%d objects: too few for four pages of %d", len(want), tc.limit)
			}
			same := func(what string, got []query.Object, from int) {
				t.Helper()
				for i, g := range got {
					w := want[from+i]
					if g.Cluster != w.Cluster || !bytes.Equal(g.JSON, w.JSON) || !bytes.Equal(g.Cells, w.Cells) || g.Row != w.Row {
						t.Fatalf("%s: object %d is not the store's: %.80s, want %.80s", what, from+i, g.JSON, w.JSON)
					}
				}
			}

			o.Reuse = &query.Reuse{}
			p1, err := r.List(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			o.Continue = p1.Continue
			p2, err := r.List(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			// Not written yet: the second page must not reuse the first's.
			same("first page after the second was read", p1.Items, 0)
			same("second page", p2.Items, len(p1.Items))
			held := append(append([]query.Object(nil), p1.Items...), p2.Items...)

			read := len(p1.Items) + len(p2.Items)
			o.Reuse.Written()
			o.Continue = p2.Continue
			for o.Continue != "" {
				p, err := r.List(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				same("a page after Written", p.Items, read)
				read += len(p.Items)
				o.Reuse.Written()
				o.Continue = p.Continue
			}
			if read != len(want) {
				t.Fatalf("%d objects with Reuse, %d without", read, len(want))
			}
			overwritten := 0
			for i, h := range held {
				if !bytes.Equal(h.JSON, want[i].JSON) {
					overwritten++
				}
			}
			if overwritten == 0 {
				t.Fatal("no object of the written pages was overwritten: their memory was not reused")
			}
		})
	}
}
