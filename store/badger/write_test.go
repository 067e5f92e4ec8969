package badger

import (
	"context"
	"errors"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestUIDIndexEntries: an update that keeps its labels learns what it
// replaces from the uid index, not from the object's record (whose
// value-log pages the recycler has dropped), across a restart; one that
// changes them, and a delete, read the record but not the JSON; a name
// reused by a new uid takes the old uid's entry away.
func TestUIDIndexEntries(t *testing.T) {
	ctx := context.Background()
	key := objKey(benchdata.PodGVR, benchdata.Namespace(0), benchdata.PodName(0), "c1")
	ukey := uidKey("c1", benchdata.PodGVR, benchdata.UID("c1", 0))
	label := func(k, v string) []byte {
		return labelKey(benchdata.PodGVR, k, v, benchdata.Namespace(0), benchdata.PodName(0), "c1")
	}
	// A corrupt record proves it was not read.
	corrupt := func(txn *bdg.Txn) error { return txn.Set(key, []byte{1}) }
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
			name:   "update keeping its labels, record unreadable",
			tamper: corrupt,
			second: benchdata.Event("c1", 0, 2),
			want:   "[had tier=frontend]",
			kept:   [][]byte{key, ukey, label("tier", "frontend")},
		},
		{
			name:   "update changing a label",
			second: relabeled(0, 2, "x"),
			want:   "[had tier=frontend]",
			gone:   [][]byte{label("tier", "frontend")},
			kept:   [][]byte{label("tier", "x-frontend"), label("app", benchdata.Apps[0])},
		},
		{
			name:   "delete",
			second: benchdata.Delete("c1", 0, 2),
			want:   "[had tier=frontend]",
			gone:   [][]byte{key, ukey, label("tier", "frontend"), label("app", benchdata.Apps[0])},
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
			s := reopenedWithPod0(t, tc.tamper)
			b := []feed.Event{{Seq: 2, Event: tc.second}}
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

// TestUIDIndexEntryNotAnEntry: a uid index value without the entry mark
// (say, a bare primary key) is corrupt, and a delete through it says so
// rather than deleting whatever the value names.
func TestUIDIndexEntryNotAnEntry(t *testing.T) {
	key := objKey(benchdata.PodGVR, benchdata.Namespace(0), benchdata.PodName(0), "c1")
	ukey := uidKey("c1", benchdata.PodGVR, benchdata.UID("c1", 0))
	s := reopenedWithPod0(t, func(txn *bdg.Txn) error { return txn.Set(ukey, key) })
	b := []feed.Event{{Seq: 2, Event: benchdata.Delete("c1", 0, 2)}}
	p, err := s.Prepare(context.Background(), "c1", b, 2)
	if err == nil {
		err = <-p.Commit()
	}
	if !errors.Is(err, errCorrupt) {
		t.Fatalf("delete through a value without the entry mark: %v, want errCorrupt", err)
	}
}

// reopenedWithPod0 is a store that was written pod 0 of cluster c1 (then
// changed by tamper, if set), closed and opened again: nothing is left in
// the writer's overlays or its filter of written keys.
func reopenedWithPod0(t *testing.T, tamper func(txn *bdg.Txn) error) *Store {
	t.Helper()
	dir := t.TempDir()
	first, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Apply(context.Background(), "c1", []feed.Event{{Seq: 1, Event: benchdata.Event("c1", 0, 1)}}, 1); err != nil {
		t.Fatal(err)
	}
	if tamper != nil {
		if err := first.db.Update(tamper); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
