package badger

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestFieldIndexPagesMatchScan: a list whose field selector requires a
// path the value index keeps (spec.nodeName) is read from the index's
// range and gives the same objects in the same order, at every page
// size, as a store without the value index scanning every object, with
// and without a namespace, clusters, more requirements and a caller's
// visibility, and after updates move Pods to another node and deletes.
func TestFieldIndexPagesMatchScan(t *testing.T) {
	indexed, ri := openReader(t)
	plain, err := Open(Options{Dir: t.TempDir(), ValueIndex: []IndexedValue{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	rp := plain.Reader(ReaderOptions{})
	t.Cleanup(func() { rp.Close() })
	for _, s := range []*Store{indexed, plain} {
		for _, c := range []string{"c1", "c2", "c3"} {
			fill(t, s, c, 0, 600, 0)
		}
	}
	notNope, _ := labels.Parse("app!=nope")
	vis := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c1", "c3"}}}}
	cases := []struct {
		name, fields string
		o            query.ListOptions
		want         int // in the first check
	}{
		{"field alone", "spec.nodeName=node-003", query.ListOptions{}, 9},
		{"double equals", "spec.nodeName==node-003", query.ListOptions{}, 9},
		{"with a second field", "spec.nodeName=node-003,status.phase=Running", query.ListOptions{}, 9},
		{"second field excludes", "spec.nodeName=node-003,status.phase=Failed", query.ListOptions{}, 0},
		{"not equals is scanned", "spec.nodeName!=node-003", query.ListOptions{}, 1800 - 9},
		{"absent value", "spec.nodeName=", query.ListOptions{}, 0},
		{"namespace", "spec.nodeName=node-003", query.ListOptions{Namespace: benchdata.Namespace(3)}, 9},
		{"metadata.namespace field", "spec.nodeName=node-003,metadata.namespace=" + benchdata.Namespace(3), query.ListOptions{}, 9},
		{"one cluster", "spec.nodeName=node-003", query.ListOptions{Clusters: []string{"c2"}}, 3},
		{"with labels", "spec.nodeName=node-003", query.ListOptions{Labels: notNope}, 9},
		{"visibility", "spec.nodeName=node-003", query.ListOptions{Visible: vis}, 6},
	}
	check := func(t *testing.T, first bool) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				all := func(r *Reader, limit int64) []string {
					t.Helper()
					o := tc.o
					o.GVR, o.Limit = benchdata.PodGVR, limit
					if o.Labels == nil {
						o.Labels = labels.Everything()
					}
					var err error
					if o.Fields, err = query.CompileFields(benchdata.PodGVR, tc.fields); err != nil {
						t.Fatal(err)
					}
					return listAll(t, r, o)
				}
				want := all(rp, 0)
				if first && len(want) != tc.want {
					t.Fatalf("scan found %d, want %d", len(want), tc.want)
				}
				limits := []int64{0, 1, 4, 256, 257}
				if tc.want > 100 {
					limits = []int64{0, 257} // pages of one would cost more than they tell
				}
				for _, limit := range limits {
					if got := all(ri, limit); !slices.Equal(got, want) {
						t.Fatalf("limit %d: the value index gave %d objects, the scan %d (or another order)", limit, len(got), len(want))
					}
				}
			})
		}
	}
	t.Run("loaded", func(t *testing.T) { check(t, true) })

	// Pods moved to node-003 by an update, others deleted: the index
	// follows.
	ctx := context.Background()
	for _, s := range []*Store{indexed, plain} {
		var evs []feed.Event
		seq := uint64(600)
		for i := 0; i < 600; i += 7 {
			seq++
			e := benchdata.Event("c2", i, 2)
			e.Object = bytes.Replace(e.Object, []byte(`"nodeName":"node-`), []byte(`"nodeName":"node-003","x":"node-`), 1)
			evs = append(evs, ev(seq, e))
		}
		for i := 3; i < 600; i += 200 {
			seq++
			evs = append(evs, ev(seq, benchdata.Delete("c2", i, 3)))
		}
		if err := s.Apply(ctx, "c2", evs, seq); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("after updates and deletes", func(t *testing.T) { check(t, false) })
}
