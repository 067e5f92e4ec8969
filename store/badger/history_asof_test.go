package badger

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/query"
)

// TestHistoryAsOfPagesPinned: an as-of list's pages are one snapshot.
// Between its pages a change observed before the as-of time arrives late
// (a fresh as-of list sees it), an object is deleted, and retention
// passes the as-of time (a fresh as-of list is then outside the window);
// the later pages still answer the state the first page began, in the
// same version. A token of another as-of time is refused.
func TestHistoryAsOfPagesPinned(t *testing.T) {
	ctx := context.Background()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	s, r := openHistory(t, HistoryOptions{Retention: time.Hour})
	apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 1), podUpsert(2, "u2", "p2", 2, "a", "Pending", 2),
		podUpsert(3, "u3", "p3", 3, "a", "Pending", 3), podUpsert(4, "u4", "p4", 4, "a", "Pending", 4), podUpsert(5, "u5", "p5", 5, "a", "Pending", 5))
	apply(t, s, podUpsert(6, "u4", "p4", 6, "b", "Running", 6))
	asOf := at(6)
	state := func(items []query.Object) map[string]string {
		out := map[string]string{}
		for _, o := range items {
			_, _, name, _ := objectMeta(o.JSON)
			out[name] = rvOf(t, o.JSON)
		}
		return out
	}
	want := map[string]string{"p1": "1", "p2": "2", "p3": "3", "p4": "6", "p5": "5"}
	whole, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: asOf})
	if err != nil || !maps.Equal(state(whole.Items), want) {
		t.Fatalf("as-of list %v, %v; want %v", state(whole.Items), err, want)
	}

	first, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: asOf, Limit: 2})
	if err != nil || len(first.Items) != 2 || first.Continue == "" {
		t.Fatalf("first page %v %q %v", state(first.Items), first.Continue, err)
	}
	// Between the pages: p5 changed at 6 s (before the as-of time,
	// applied late), p2 deleted at 9 s, then retention past 10 s.
	apply(t, s, podUpsert(7, "u5", "p5", 8, "z", "Running", 6), podDelete(8, "u2", "p2", 9, 9))
	fresh, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: asOf})
	if err != nil || state(fresh.Items)["p5"] != "8" {
		t.Fatalf("a fresh as-of list does not see the late change: %v %v", state(fresh.Items), err)
	}
	if err := s.Retain(ctx, at(10).Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: asOf}); !errors.Is(err, query.ErrOutsideWindow) {
		t.Fatalf("a fresh as-of list after retention: %v, want outside the window", err)
	}

	if _, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: at(5), Limit: 2, Continue: first.Continue}); !errors.Is(err, query.ErrInvalid) {
		t.Errorf("a token of another as-of time: %v, want invalid", err)
	}
	got := state(first.Items)
	for p, pages := first, 1; p.Continue != ""; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages of 2 for 5 objects")
		}
		next, err := r.List(ctx, query.ListOptions{GVR: histPods, AsOf: asOf, Limit: 2, Continue: p.Continue})
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		if !maps.Equal(next.Version, first.Version) {
			t.Errorf("page %d version %v, the first's %v", pages+1, next.Version, first.Version)
		}
		for k, v := range state(next.Items) {
			if _, dup := got[k]; dup {
				t.Errorf("page %d repeats %s", pages+1, k)
			}
			got[k] = v
		}
		p = next
	}
	if !maps.Equal(got, want) {
		t.Errorf("paged as-of list %v, want the first page's state %v", got, want)
	}
}
