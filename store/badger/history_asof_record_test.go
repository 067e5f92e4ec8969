package badger

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHistoryRecordAt: what an as-of list reads from an object's record
// first (recordAt) is what objectAt rebuilds, and its labels are the
// rebuilt state's, for every object at every time of a random sequence
// of adds, label and status edits (a label set, changed, added, removed,
// all removed), deletes, re-creates and unchanged deliveries, with a
// whole state every third revision; and it answers for many.
func TestHistoryRecordAt(t *testing.T) {
	ctx := context.Background()
	s, _ := openHistory(t, HistoryOptions{SnapshotEvery: 3})
	rng := rand.New(rand.NewPCG(48, 9))
	type state struct {
		uid    string
		labels string // the labels member's value
		phase  string
		rv     int
	}
	jsonOf := func(name string, st state) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"ns","uid":%q,"resourceVersion":"%d","labels":%s},"spec":{"nodeName":"node-1"},"status":{"phase":%q}}`,
			name, st.uid, st.rv, st.labels, st.phase)
	}
	labelSets := []string{`{}`, `{"tier":"a"}`, `{"tier":"b"}`, `{"tier":"a","churned":"yes"}`, `{"tier":"a\"q","x":"1"}`, `{"app":"web","tier":"b","churned":"yes"}`}
	live := map[string]state{}
	names := map[string]bool{}
	for i := range 400 {
		name := fmt.Sprintf("p%02d", rng.IntN(16))
		names[name] = true
		cur, ok := live[name]
		e := &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod",
			Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(i + 1), ObservedUnixNano: t0.Add(time.Duration(i+1) * time.Second).UnixNano(), Namespaced: true,
			Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT}
		switch n := rng.IntN(10); {
		case ok && n == 0:
			e.Uid, e.Type = cur.uid, fleetviewv1.EventType_EVENT_TYPE_DELETE
			delete(live, name)
		case ok && n == 1: // delivered again unchanged
			e.Uid, e.Object, e.ResourceVersion = cur.uid, jsonOf(name, cur), fmt.Sprint(cur.rv)
		default:
			st := state{uid: fmt.Sprintf("u%d", i), labels: labelSets[rng.IntN(len(labelSets))], phase: []string{"Pending", "Running"}[rng.IntN(2)], rv: i + 1}
			if ok {
				st.uid = cur.uid
				if n < 5 {
					st.labels = cur.labels // a status edit
				}
			}
			e.Uid, e.Object = st.uid, jsonOf(name, st)
			live[name] = st
		}
		if err := s.Apply(ctx, "c1", []feed.Event{{Seq: uint64(i + 1), Event: e}}, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	answered, present := 0, 0
	if err := s.db.View(func(txn *bdg.Txn) error {
		h := newHistIters(txn)
		defer h.close()
		for at := 0; at <= 410; at += 3 {
			ts := t0.Add(time.Duration(at) * time.Second).UnixNano()
			for name := range names {
				want, wantCells, err := objectAt(txn, h, "c1", histPods, "ns", name, ts, nil)
				if err != nil {
					return err
				}
				if want != nil {
					present++
				}
				for _, withLabels := range []bool{false, true} {
					got, cells, lbls, ok, err := recordAt(txn, h, objKey(histPods, "ns", name, "c1"), "c1", histPods, ts, withLabels)
					if err != nil {
						return fmt.Errorf("%s at %d: %w", name, at, err)
					}
					if !ok {
						continue
					}
					answered++
					if !bytes.Equal(got, want) || !bytes.Equal(cells, wantCells) {
						t.Errorf("%s at t0+%ds: record first %s, rebuilt %s", name, at, got, want)
					}
					if !withLabels {
						continue
					}
					wl, err := rawjson.CheckedLabels(want)
					if err != nil {
						return err
					}
					if len(wl) == 0 {
						wl = nil
					}
					if len(lbls) == 0 {
						lbls = nil
					}
					if !maps.Equal(lbls, wl) {
						t.Errorf("%s at t0+%ds: labels %v, the state's %v", name, at, lbls, wl)
					}
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Twice each: with labels and without. Deletes, re-creates and
	// deliveries after the newest revision leave about 60% to objectAt.
	if answered/2 < present/4 {
		t.Errorf("the record answered %d times of %d", answered/2, present)
	}
}

// TestLabelsBefore: the labels of a state before reverse patches, from
// the labels after them and the patches' label edits; a patch that does
// more than edit labels (a state kept whole, labels or metadata replaced
// or removed, an escaped key) leaves them to be read from the state.
func TestLabelsBefore(t *testing.T) {
	rev := func(prev string, whole bool) seqRev {
		return seqRev{r: revision{prev: []byte(prev), prevWhole: whole}}
	}
	now := map[string]string{"tier": "a", "churned": "yes"}
	cases := []struct {
		name    string
		patches []seqRev // newer revisions, oldest first
		want    map[string]string
		ok      bool
	}{
		{"no label edit", []seqRev{rev(`{"metadata":{"resourceVersion":"1"},"status":{"phase":"Pending"}}`, false)}, now, true},
		{"added since", []seqRev{rev(`{"metadata":{"labels":{"churned":null}}}`, false)}, map[string]string{"tier": "a"}, true},
		{"changed twice", []seqRev{rev(`{"metadata":{"labels":{"tier":"c"}}}`, false), rev(`{"metadata":{"labels":{"tier":"b","churned":null}}}`, false)},
			map[string]string{"tier": "c"}, true},
		{"escaped value", []seqRev{rev(`{"metadata":{"labels":{"tier":"a\"q"}}}`, false)}, map[string]string{"tier": `a"q`, "churned": "yes"}, true},
		{"same state", []seqRev{rev(`{}`, false)}, now, true},
		{"escaped key", []seqRev{rev(`{"metadata":{"labels":{"t\u0069er":"b"}}}`, false)}, nil, false},
		{"labels replaced", []seqRev{rev(`{"metadata":{"labels":null}}`, false)}, nil, false},
		{"metadata replaced", []seqRev{rev(`{"metadata":null}`, false)}, nil, false},
		{"kept whole", []seqRev{rev(`{"metadata":{}}`, true)}, nil, false},
		{"a number", []seqRev{rev(`{"metadata":{"labels":{"tier":1}}}`, false)}, nil, false},
		{"a key twice", []seqRev{rev(`{"metadata":{"labels":{"tier":"b","tier":"c"}}}`, false)}, map[string]string{"tier": "c", "churned": "yes"}, true},
		{"removed, then set", []seqRev{rev(`{"metadata":{"labels":{"tier":null,"new":"x"}}}`, false), rev(`{"metadata":{"labels":{"tier":"b","churned":null}}}`, false)},
			map[string]string{"new": "x"}, true},
	}
	for _, tc := range cases {
		// labelsThen tells the same labels, read in place from the
		// record's encoded labels, for every key either side holds and
		// one neither does.
		t.Run(tc.name+"/in place", func(t *testing.T) {
			var l labelsThen
			raw := appendLabels(nil, now)
			if ok := l.set(raw, append([]seqRev{{}}, tc.patches...)); ok != tc.ok {
				t.Fatalf("set: %v, want %v", ok, tc.ok)
			}
			if !tc.ok {
				return
			}
			for _, k := range append(slices.Collect(maps.Keys(now)), slices.Collect(maps.Keys(tc.want))...) {
				v, ok := l.Lookup(k)
				wv, wok := tc.want[k]
				if v != wv || ok != wok || l.Has(k) != wok || l.Get(k) != wv {
					t.Errorf("label %q: %q, %v; want %q, %v", k, v, ok, wv, wok)
				}
			}
			if l.Has("absent") {
				t.Error(`"absent" is there`)
			}
			sel := labels.SelectorFromSet(tc.want)
			if len(tc.want) > 0 && !sel.Matches(&l) {
				t.Errorf("%v does not match its own labels", sel)
			}
		})
		for _, owned := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/owned=%v", tc.name, owned), func(t *testing.T) {
				in := maps.Clone(now)
				got, ok := labelsBefore(in, append([]seqRev{{}}, tc.patches...), owned)
				if ok != tc.ok || ok && !maps.Equal(got, tc.want) {
					t.Errorf("labels %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
				}
				if !owned && !maps.Equal(in, now) {
					t.Errorf("the labels after were changed: %v", in)
				}
			})
		}
	}
	t.Run("none after, owned", func(t *testing.T) {
		got, ok := labelsBefore(nil, []seqRev{{}, rev(`{"metadata":{"labels":{"tier":"a"}}}`, false)}, true)
		if !ok || !maps.Equal(got, map[string]string{"tier": "a"}) {
			t.Errorf("labels %v, %v; want tier=a", got, ok)
		}
	})
}

// TestArenaRoom: what is appended in room's buffer and kept stays in the
// chunk, full, and the next room starts after it; an append past the
// room moves the copy out, and the chunk does not take it.
func TestArenaRoom(t *testing.T) {
	cases := []struct {
		name      string
		room      int
		write     string
		inChunk   bool
		usedAfter int // of the chunk, after kept
	}{
		{"within", 8, "abcdef", true, 6},
		{"exactly", 6, "abcdef", true, 6},
		{"past the room", 4, "abcdef", false, 0},
		{"empty", 4, "", false, 0},
		{"over a quarter chunk", arenaMost/4 + 1, "abc", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a arena
			b := append(a.room(tc.room), tc.write...)
			got := a.kept(b)
			if string(got) != tc.write || cap(got) != len(got) {
				t.Fatalf("kept %q (cap %d), want %q, full", got, cap(got), tc.write)
			}
			inChunk := len(got) > 0 && len(a.buf) > 0 && &got[0] == &a.buf[0]
			if inChunk != tc.inChunk || len(a.buf) != tc.usedAfter {
				t.Fatalf("in the chunk %v with %d bytes used, want %v, %d", inChunk, len(a.buf), tc.inChunk, tc.usedAfter)
			}
			next := a.kept(append(a.room(3), "xyz"...))
			if string(got) != tc.write || string(next) != "xyz" {
				t.Errorf("after the next room: %q, %q", got, next)
			}
		})
	}
}

// TestMergeSorted: the as-of rebuild's per-worker sorted shares merged
// into one order, as one sort of the whole would give.
func TestMergeSorted(t *testing.T) {
	cases := []struct {
		name  string
		lists [][]int
	}{
		{"none", nil},
		{"empty lists", [][]int{{}, {}}},
		{"one", [][]int{{1, 3, 5}}},
		{"interleaved", [][]int{{1, 4, 7}, {2, 5, 8}, {0, 3, 6, 9}}},
		{"one empty", [][]int{{}, {2, 2, 3}}},
		{"ties across lists", [][]int{{1, 1, 2}, {1, 2, 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want []int
			for _, l := range tc.lists {
				want = append(want, l...)
			}
			slices.Sort(want)
			got := mergeSorted(slices.Clone(tc.lists), func(a, b int) int { return a - b })
			if !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("merged %v, want %v", got, want)
			}
		})
	}
}
