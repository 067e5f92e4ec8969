package badger

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestHistoryBytesPerChange measures the history's bytes per change of a
// realistic Pod (benchdata): a one-label change and a status change cost
// a patch each way and the feed entries, not an object, and an added
// object no copy of itself (docs/benchmarks/history.md). These are the
// logical bytes (keys and values, what MaxBytes bounds); what a change
// costs on disk is TestHistoryDiskBytesPerChange's.
func TestHistoryBytesPerChange(t *testing.T) {
	const pods = 200
	cases := []struct {
		name  string
		edit  func(obj []byte) []byte
		limit int64 // bytes per change at most
	}{
		{"one label", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"app":"web"`), []byte(`"app":"web2"`), 1)
		}, 320}, // 271 measured 2026-12-07 (429 in the older forms)
		{"a label added before the others", func(b []byte) []byte {
			// The API server writes a map's keys sorted: a label whose
			// key sorts first comes first. No forward merge patch gives
			// those bytes back; the reverse one does.
			return bytes.Replace(b, []byte(`"labels":{`), []byte(`"labels":{"aaa":"x",`), 1)
		}, 400}, // 370 (2,243 before the reverse patch was kept alone: the whole state)
		{"status", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"qosClass":"Burstable"`), []byte(`"qosClass":"Guaranteed"`), 1)
		}, 340}, // 292 (492)
		{"a container's status (an array)", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"ready":true`), []byte(`"ready":false`), 1)
		}, 750}, // 674 (1256): the whole array back; RFC 7386 has no array edits
	}
	// The older binary's forms (Store.histLegacy) are measured beside,
	// for the comparison, without a limit.
	for _, legacy := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if legacy {
				name += ", older binary"
			}
			t.Run(name, func(t *testing.T) {
				s, evs, before := addPods(t, legacy, pods)
				ctx := context.Background()
				// An add's revision holds no state: the object's record is it.
				if add := before / pods; add > 420 && !legacy {
					t.Errorf("%d bytes of history per add, want at most 420", add)
				} else {
					t.Logf("%d bytes of history per add", add)
				}
				evs = evs[:0]
				for i := range pods {
					e := benchdata.Event("c1", i, 1)
					changed := bytes.Replace(tc.edit(e.Object), []byte(`"resourceVersion":"1"`), []byte(`"resourceVersion":"2"`), 1)
					e.ResourceVersion = "2"
					if bytes.Equal(changed, e.Object) {
						t.Fatalf("the edit changed nothing in %s", e.Object)
					}
					e.Object, e.ObservedUnixNano = changed, time.Now().UnixNano()
					evs = append(evs, feed.Event{Seq: uint64(pods + i + 1), Event: e})
				}
				if err := s.Apply(ctx, "c1", evs, 2*pods); err != nil {
					t.Fatal(err)
				}
				after, err := s.historyBytes()
				if err != nil {
					t.Fatal(err)
				}
				per := (after - before) / pods
				t.Logf("%s: %d bytes of history per change (object %d bytes)", tc.name, per, len(evs[0].Event.GetObject()))
				if per > tc.limit && !legacy {
					t.Errorf("%d bytes per change, want at most %d", per, tc.limit)
				}
			})
		}
	}
}

// TestHistoryBytesPerChangeAmortized is TestHistoryBytesPerChange over
// many changes of each object, so its share of the whole states kept
// (s2-compressed; for a one-label change every SnapshotEvery revisions,
// chainCost) is in the figure: 256 one-label changes of each Pod, two
// whole states each (sixteen with SnapshotEvery 16, before 2026-12-07
// 22:00, when the test made 32 changes).
func TestHistoryBytesPerChangeAmortized(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool
		limit  int64
	}{
		// 292 measured 2026-12-07 22:00 (395 with a whole state every
		// 16th revision, the same 256 changes).
		{"current forms", false, 310},
		{"an older binary's (format 3, text uids)", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bytesPerChangeAmortized(t, tc.legacy, tc.limit)
		})
	}
}

func bytesPerChangeAmortized(t *testing.T, legacy bool, limit int64) {
	const pods, changes = 100, 256
	s, evs, before := addPods(t, legacy, pods)
	ctx := context.Background()
	seq := uint64(pods)
	for c := range changes {
		evs, seq = labelRound(evs[:0], pods, c, seq)
		if err := s.Apply(ctx, "c1", evs, seq); err != nil {
			t.Fatal(err)
		}
	}
	after, err := s.historyBytes()
	if err != nil {
		t.Fatal(err)
	}
	per := (after - before) / (pods * changes)
	t.Logf("%d bytes of history per one-label change over %d changes of each Pod (SnapshotEvery %d; object %d bytes)", per, changes, s.hist.SnapshotEvery, len(evs[0].Event.GetObject()))
	if limit > 0 && per > limit {
		t.Errorf("%d bytes per change, want at most %d", per, limit)
	}
}

// addPods opens a store keeping history (in an older binary's forms when
// legacy), adds n benchdata Pods to cluster c1, and returns the events
// and the history bytes they cost.
func addPods(t *testing.T, legacy bool, n int) (*Store, []feed.Event, int64) {
	t.Helper()
	s, _ := openHistory(t, HistoryOptions{})
	s.histLegacy = legacy
	var evs []feed.Event
	for i := range n {
		evs = append(evs, feed.Event{Seq: uint64(i + 1), Event: benchdata.Event("c1", i, 1)})
	}
	if err := s.Apply(context.Background(), "c1", evs, uint64(n)); err != nil {
		t.Fatal(err)
	}
	before, err := s.historyBytes()
	if err != nil {
		t.Fatal(err)
	}
	return s, evs, before
}

// labelRound appends round c of the one-label changes to evs: every one
// of the pods benchdata Pods relabeled (app: web -> web<c>) at
// resourceVersion c+2, numbered after seq; it returns the last seq.
func labelRound(evs []feed.Event, pods, c int, seq uint64) ([]feed.Event, uint64) {
	for i := range pods {
		e := benchdata.Event("c1", i, 1)
		rv := fmt.Sprint(c + 2)
		e.Object = bytes.Replace(e.Object, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
		e.Object = bytes.Replace(e.Object, []byte(`"resourceVersion":"1"`), []byte(`"resourceVersion":"`+rv+`"`), 1)
		e.ResourceVersion, e.ObservedUnixNano = rv, time.Now().UnixNano()
		seq++
		evs = append(evs, feed.Event{Seq: seq, Event: e})
	}
	return evs, seq
}
