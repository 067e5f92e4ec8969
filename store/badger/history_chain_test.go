package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestHistoryWholeStatePolicy applies hundreds of changes of one kind to
// a benchdata Pod and checks where its revisions keep the previous state
// whole (chainCost): never more than SnapshotEvery-1 reverse patches in
// a row, their bytes never more than about chainBudget object sizes
// (three, rounded up patch by patch), a one-label change's chain as long
// as the cap allows, a larger change's cut sooner; and every revision
// reads back as the object it was.
func TestHistoryWholeStatePolicy(t *testing.T) {
	pod := benchdata.Pod("c1", 0, 1)
	annotated := func(c int) []byte {
		// A changed annotation of about 600 bytes: its patch well under
		// half the Pod, so kept as a patch, but 150 of them several
		// times the Pod's bytes.
		v := strings.Repeat(fmt.Sprintf("%03d", c%1000), 200)
		return bytes.Replace(pod, []byte(`"labels":{`), []byte(`"annotations":{"note":"`+v+`"},"labels":{`), 1)
	}
	for _, tc := range []struct {
		name    string
		every   int // SnapshotEvery; 0: the default
		changes int
		object  func(c int) []byte
		// wantRun: the number of patches between two whole states, when
		// the policy decides it exactly; 0: only the bounds are checked.
		wantRun int
		// maxRun: the chains must be at most this long.
		maxRun int
	}{
		{"one-label changes, default cap", 0, 300, func(c int) []byte {
			return bytes.Replace(pod, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
		}, defaultSnapshotEvery - 1, defaultSnapshotEvery - 1},
		{"one-label changes, SnapshotEvery 16 (the cap before 2026-12-07 22:00)", 16, 100, func(c int) []byte {
			return bytes.Replace(pod, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
		}, 15, 15},
		{"600-byte annotation changes: the bytes cut the chain", 0, 150, annotated, 0, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := openHistory(t, HistoryOptions{SnapshotEvery: tc.every})
			want := applyChanges(t, s, 0, tc.changes, tc.object)
			kinds, runs := chainRuns(t, s, s.hist.SnapshotEvery, len(pod))
			if len(runs) == 0 {
				t.Fatalf("no whole state in %d changes: %s", tc.changes, kinds)
			}
			for _, n := range runs {
				if n > tc.maxRun || (tc.wantRun > 0 && n != tc.wantRun) {
					t.Fatalf("chains of %v patches, want %d (at most %d): %s", runs, tc.wantRun, tc.maxRun, kinds)
				}
			}
			t.Logf("%d changes: chains of %v patches between whole states", tc.changes, runs)
			checkRevisions(t, r, want)
		})
	}
}

// TestHistoryChainFromOlderHeads: a store whose uid entries a writer
// with a whole state every 16th revision left (its chain byte counted
// patches, as every binary's before 2026-12-07 22:00 did) goes on with
// the chain the byte says, read as that many small patches, up to the
// cap of 128; every revision reads back.
func TestHistoryChainFromOlderHeads(t *testing.T) {
	pod := benchdata.Pod("c1", 0, 1)
	relabel := func(c int) []byte {
		return bytes.Replace(pod, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
	}
	s, r := openHistory(t, HistoryOptions{SnapshotEvery: 16})
	want := applyChanges(t, s, 0, 20, relabel)
	s.hist.SnapshotEvery = defaultSnapshotEvery // the newer binary, on the same store
	want = append(want, applyChanges(t, s, 21, 150, relabel)...)
	kinds, runs := chainRuns(t, s, defaultSnapshotEvery, len(pod))
	// 15 patches and a whole state by the older rule; then the chain of
	// 4 goes on to 127.
	if fmt.Sprint(runs) != "[15 127]" {
		t.Fatalf("chains of %v patches, want [15 127]: %s", runs, kinds)
	}
	checkRevisions(t, r, want)
}

// applyChanges applies changes from..to of benchdata Pod 0 (0: its add),
// change c's object object(c) at resourceVersion c+1, one batch each, and
// returns their objects.
func applyChanges(t *testing.T, s *Store, from, to int, object func(c int) []byte) [][]byte {
	t.Helper()
	var want [][]byte
	for c := from; c <= to; c++ {
		e := benchdata.Event("c1", 0, c+1)
		if c > 0 {
			e.Object = bytes.Replace(object(c), []byte(`"resourceVersion":"1"`), fmt.Appendf(nil, `"resourceVersion":"%d"`, c+1), 1)
		}
		e.ObservedUnixNano = t0.Add(time.Duration(c) * time.Second).UnixNano()
		want = append(want, e.Object)
		if err := s.Apply(context.Background(), "c1", []feed.Event{{Seq: uint64(c + 1), Event: e}}, uint64(c+1)); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// chainRuns are Pod 0's stored revision kinds (storedKinds' letters) and
// the lengths of its chains of reverse patches that end in a whole
// state; it fails the test at a chain longer than every-1 patches or
// holding more than three times size bytes of them.
func chainRuns(t *testing.T, s *Store, every, size int) (string, []int) {
	t.Helper()
	var kinds strings.Builder
	var runs []int
	run, runBytes := 0, 0
	if err := s.db.View(func(txn *bdg.Txn) error {
		return eachRevision(txn, "c1", benchdata.PodGVR, benchdata.UID("c1", 0), func(_ uint64, rv revision, _ []byte) (bool, error) {
			switch {
			case rv.prev == nil:
				kinds.WriteByte('f')
			case rv.prevWhole:
				kinds.WriteByte('s')
				runs = append(runs, run)
				run, runBytes = 0, 0
			default:
				kinds.WriteByte('p')
				run++
				runBytes += len(rv.prev)
				if run > every-1 {
					return false, fmt.Errorf("%d patches in a row, SnapshotEvery %d", run, every)
				}
				if runBytes > 3*size {
					return false, fmt.Errorf("%d bytes of patches in a row, the object %d", runBytes, size)
				}
			}
			return true, nil
		})
	}); err != nil {
		t.Fatalf("%v; stored kinds %s", err, kinds.String())
	}
	return kinds.String(), runs
}

// checkRevisions fails the test unless Pod 0's revisions read back as
// want, oldest first.
func checkRevisions(t *testing.T, r *Reader, want [][]byte) {
	t.Helper()
	e := benchdata.Event("c1", 0, 1)
	p, err := r.Revisions(context.Background(), query.RevisionsOptions{Object: query.GetOptions{GVR: benchdata.PodGVR, Cluster: "c1", Namespace: e.GetNamespace(), Name: e.GetName()}, Limit: int64(len(want))})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Revisions) != len(want) {
		t.Fatalf("%d revisions, want %d", len(p.Revisions), len(want))
	}
	for i, rev := range p.Revisions {
		if !bytes.Equal(rev.Object, want[i]) {
			t.Fatalf("revision %d reads\n%s\nwant\n%s", i, rev.Object, want[i])
		}
	}
}

func TestChainCost(t *testing.T) {
	for _, tc := range []struct {
		name              string
		patch, obj, every int
		want              int
	}{
		{"a one-label patch of a 3.2 KB Pod", 60, 3200, 128, 1},
		{"a status patch", 300, 3200, 128, 6},
		{"half the object: the largest patch kept", 1600, 3200, 128, 32},
		{"a small patch counts one", 1, 3200, 128, 1},
		{"cap 4: every patch one", 300, 3200, 4, 1},
		{"no object bytes: the chain ends", 10, 0, 128, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chainCost(tc.patch, tc.obj, tc.every); got != tc.want {
				t.Errorf("chainCost(%d, %d, %d) = %d, want %d", tc.patch, tc.obj, tc.every, got, tc.want)
			}
		})
	}
}

func TestHistorySnapshotEveryBounds(t *testing.T) {
	_, err := Open(Options{Dir: t.TempDir(), History: HistoryOptions{Retention: time.Hour, MaxBytes: 1 << 20, SnapshotEvery: maxSnapshotEvery + 1}})
	if !errors.Is(err, errBadOption) || !strings.Contains(err.Error(), "SnapshotEvery") {
		t.Fatalf("SnapshotEvery %d: %v, want errBadOption naming the field", maxSnapshotEvery+1, err)
	}
}
