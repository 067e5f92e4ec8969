package badger

import (
	"context"
	"errors"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestUIDIndexCarriesLabels: updates and deletes find what they replace in
// the uid index, not in the object's record (whose value-log pages the
// recycler has dropped), across a restart; a legacy entry (the bare primary
// key) still works by reading the record; a name reused by a new uid takes
// the old uid's entry away.
func TestUIDIndexCarriesLabels(t *testing.T) {
	ctx := context.Background()
	key := objKey(benchdata.PodGVR, benchdata.Namespace(0), benchdata.PodName(0), "c1")
	ukey := uidKey("c1", benchdata.PodGVR, benchdata.UID("c1", 0))
	for _, tc := range []struct {
		name string
		// tamper changes the stored state before the second batch.
		tamper func(txn *bdg.Txn) error
		second *fleetviewv1.ResourceEvent
		want   string // fmtPriors of the second batch
		// gone lists keys the second batch must leave absent; kept, keys
		// it must leave present.
		gone, kept [][]byte
	}{
		{
			name: "update with the record unreadable",
			// A corrupt record proves the update did not read it.
			tamper: func(txn *bdg.Txn) error { return txn.Set(key, []byte{1}) },
			second: relabeled(0, 2, "x"),
			want:   "[had tier=frontend]",
			gone:   [][]byte{labelKey(benchdata.PodGVR, "tier", "frontend", benchdata.Namespace(0), benchdata.PodName(0), "c1")},
			kept:   [][]byte{labelKey(benchdata.PodGVR, "tier", "x-frontend", benchdata.Namespace(0), benchdata.PodName(0), "c1")},
		},
		{
			name: "delete with the record unreadable",
			// Only a record the delete did not read can be corrupt here.
			tamper: func(txn *bdg.Txn) error { return txn.Set(key, []byte{1}) },
			second: benchdata.Delete("c1", 0, 2),
			want:   "[had tier=frontend]",
			gone:   [][]byte{key, ukey, labelKey(benchdata.PodGVR, "app", benchdata.Apps[0], benchdata.Namespace(0), benchdata.PodName(0), "c1")},
		},
		{
			name:   "update through a legacy entry",
			tamper: func(txn *bdg.Txn) error { return txn.Set(ukey, key) },
			second: relabeled(0, 2, "x"),
			want:   "[had tier=frontend]",
			gone:   [][]byte{labelKey(benchdata.PodGVR, "tier", "frontend", benchdata.Namespace(0), benchdata.PodName(0), "c1")},
		},
		{
			name:   "delete through a legacy entry",
			tamper: func(txn *bdg.Txn) error { return txn.Set(ukey, key) },
			second: benchdata.Delete("c1", 0, 2),
			want:   "[had tier=frontend]",
			gone:   [][]byte{key, ukey},
		},
		{
			name:   "name reused by a new uid",
			second: recreated(0, 2),
			want:   "[new]",
			gone:   [][]byte{ukey},
			kept:   [][]byte{key, uidKey("c1", benchdata.PodGVR, "reused-0")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Apply(ctx, "c1", []materializer.Event{{Seq: 1, Event: benchdata.Event("c1", 0, 1)}}, 1); err != nil {
				t.Fatal(err)
			}
			if tc.tamper != nil {
				if err := first.db.Update(tc.tamper); err != nil {
					t.Fatal(err)
				}
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopened: nothing is left in the writer's overlays.
			s, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			b := []materializer.Event{{Seq: 2, Event: tc.second}}
			p, err := s.Prepare(ctx, "c1", b, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-p.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := fmtPriors(b); got != tc.want {
				t.Errorf("prior %s, want %s", got, tc.want)
			}
			has := func(k []byte) bool {
				err := s.db.View(func(txn *bdg.Txn) error {
					_, err := txn.Get(k)
					return err
				})
				if err != nil && !errors.Is(err, bdg.ErrKeyNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}
			for _, k := range tc.gone {
				if has(k) {
					t.Errorf("%q still in the store", k)
				}
			}
			for _, k := range tc.kept {
				if !has(k) {
					t.Errorf("%q missing from the store", k)
				}
			}
		})
	}
}
