package badger

import (
	"context"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
)

// TestHistoryLabelsRetainedInFlight: a batch that names a J/ entry it did
// not write (the uid entry or the store's cache say the set is in the
// hour) and is made while retention removes that hour's entries (its
// other changes all expired, a newer hour's change left by a cluster
// ahead of this one) commits a change whose labels still read: the hour
// a batch in flight names stays until the batch is done, and the next
// batch keeps its labels inline once retention passed the hour.
func TestHistoryLabelsRetainedInFlight(t *testing.T) {
	minute := 60
	other := func(seq uint64, at int) feed.Event {
		e := podUpsert(seq, "o1", "o1", int(seq), "z", "Pending", at)
		e.Event.Cluster = "c2"
		return e
	}
	cases := []struct {
		name string
		// late is c1's change made while retention runs, at t0+50 min:
		// within the window, in t0's hour, after the hour's other
		// changes expired.
		late feed.Event
	}{
		{"the uid entry names the hour", podUpsert(3, "u1", "p1", 3, "a", "Running", 50*minute)},
		{"the cache holds the set", podUpsert(3, "u2", "p2", 3, "a", "Pending", 50*minute)},
		{"a set of its own", podUpsert(3, "u3", "p3", 3, "q", "Pending", 50*minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, r := openHistory(t, HistoryOptions{Retention: 30 * time.Minute})
			ctx := context.Background()
			apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 5*minute))
			if err := s.Apply(ctx, "c2", []feed.Event{other(1, 65*minute)}, 1); err != nil {
				t.Fatal(err)
			}
			p, err := s.Prepare(ctx, "c1", []feed.Event{tc.late}, 3)
			if err != nil {
				t.Fatal(err)
			}
			// At t0+70 min: p1's add (t0+5 min) expires, c2's change in
			// the next hour stays, so t0's hour has no change left but the
			// one in flight.
			if err := s.Retain(ctx, t0.Add(70*time.Minute)); err != nil {
				p.Discard()
				t.Fatal(err)
			}
			if err := <-p.Commit(); err != nil {
				t.Fatal(err)
			}
			changes := func(step string, want ...string) {
				t.Helper()
				page, err := r.Changes(ctx, query.ChangesOptions{})
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				var tiers []string
				for _, c := range page.Changes {
					tiers = append(tiers, c.Cluster+"/"+c.Labels["tier"])
				}
				if len(tiers) != len(want) {
					t.Fatalf("%s: changes %v, want %v", step, tiers, want)
				}
				for i := range want {
					if tiers[i] != want[i] {
						t.Errorf("%s: changes %v, want %v", step, tiers, want)
					}
				}
			}
			tier := map[string]string{"p1": "a", "p2": "a", "p3": "q"}[tc.late.Event.GetName()]
			changes("committed", "c1/"+tier, "c2/z")
			// Retention again, nothing in flight: the hour's entries stay
			// while the late change is in the window.
			if err := s.Retain(ctx, t0.Add(75*time.Minute)); err != nil {
				t.Fatal(err)
			}
			changes("retained again", "c1/"+tier, "c2/z")
			// The next change in the hour (retention passed it) keeps its
			// labels inline.
			apply(t, s, podUpsert(4, "u1", "p1", 4, "a", "Failed", 55*minute))
			changes("later", "c1/"+tier, "c1/a", "c2/z")
			counted, err := s.historyBytes()
			if err != nil {
				t.Fatal(err)
			}
			if stored := storedHistoryBytes(t, s); counted != stored {
				t.Errorf("%d history bytes counted, %d stored", counted, stored)
			}
			// Once the late changes expire, the hour's entries go.
			if err := s.Retain(ctx, t0.Add(86*time.Minute)); err != nil {
				t.Fatal(err)
			}
			changes("expired", "c2/z")
			if got := storedKeys(t, s, internKey(labelEpochOf(t0.UnixNano()), "c1", nil)); got != 0 {
				t.Errorf("%d label sets of t0's hour left", got)
			}
		})
	}
}

// TestLabelPins: retention removes no epoch a batch pinned, nor one a
// batch released while retention looked (it committed after the
// snapshot that found the epoch unused), and from then on refuses pins
// below what it may remove.
func TestLabelPins(t *testing.T) {
	cases := []struct {
		name string
		// pinned before the pass, released during it, before given to
		// settle, then the epoch retention may remove before and whether
		// a pin of epoch 6 is taken after.
		pinned, released []int64
		before, want     int64
		pin6             bool
	}{
		{"nothing in flight", nil, nil, 7, 7, false},
		{"a batch in flight", []int64{5}, nil, 7, 5, false},
		{"a batch committed during the pass", []int64{5}, []int64{5}, 7, 5, false},
		{"pins above what goes", []int64{8}, nil, 7, 7, false},
		{"nothing to remove", nil, nil, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p labelPins
			for _, e := range tc.pinned {
				if !p.pin(e) {
					t.Fatalf("pin %d refused before any pass", e)
				}
			}
			p.watch()
			for _, e := range tc.released {
				p.unpin(map[int64]bool{e: true})
			}
			if got := p.settle(tc.before); got != tc.want {
				t.Errorf("settle(%d) = %d, want %d", tc.before, got, tc.want)
			}
			if got := p.pin(6); got != tc.pin6 {
				t.Errorf("pin 6 after the pass: %v, want %v", got, tc.pin6)
			}
			// Released after the pass: the next pass does not hold it.
			p.unpin(map[int64]bool{5: true, 6: true, 8: true})
			p.watch()
			if got := p.settle(tc.before); got != tc.before {
				t.Errorf("the next pass: settle(%d) = %d", tc.before, got)
			}
		})
	}
}
