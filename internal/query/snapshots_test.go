package query

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSnapshotsQuota: each step adds a snapshot "client:n" and names the
// snapshots it must drop; the per-client quota drops the client's own
// oldest, the global limit the oldest of the client holding the most, and
// expired snapshots go first.
func TestSnapshotsQuota(t *testing.T) {
	type step struct {
		add   string // client:id
		at    time.Duration
		drops []string
	}
	cases := []struct {
		name           string
		max, perClient int
		steps          []step
		held           []string
	}{
		{"per client: own oldest", 10, 2, []step{
			{"a:1", 0, nil}, {"b:1", 1, nil}, {"a:2", 2, nil}, {"a:3", 3, []string{"a:1"}}, {"b:2", 4, nil},
		}, []string{"a:2", "a:3", "b:1", "b:2"}},
		{"global: the biggest holder", 3, 0, []step{
			{"a:1", 0, nil}, {"a:2", 1, nil}, {"b:1", 2, nil}, {"b:2", 3, []string{"a:1"}}, {"c:1", 4, []string{"b:1"}},
		}, []string{"a:2", "b:2", "c:1"}},
		{"global: equal holders lose the oldest", 2, 0, []step{
			{"a:1", 0, nil}, {"b:1", 1, nil}, {"c:1", 2, []string{"a:1"}},
		}, []string{"b:1", "c:1"}},
		{"expired first", 2, 1, []step{
			{"a:1", 0, nil}, {"b:1", 1, nil}, {"c:1", 10 * time.Minute, []string{"a:1", "b:1"}},
		}, []string{"c:1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSnapshots[string](tc.max, tc.perClient)
			t0 := time.Unix(1_800_000_000, 0)
			for _, st := range tc.steps {
				client, _, _ := strings.Cut(st.add, ":")
				now := t0.Add(st.at)
				drops := s.Add(st.add, client, st.add, now, now.Add(5*time.Minute))
				slices.Sort(drops)
				if !slices.Equal(drops, st.drops) {
					t.Fatalf("add %s: dropped %v, want %v", st.add, drops, st.drops)
				}
			}
			last := t0.Add(tc.steps[len(tc.steps)-1].at)
			var held []string
			for _, id := range []string{"a:1", "a:2", "a:3", "b:1", "b:2", "c:1"} {
				if v, ok := s.Get(id, last); ok {
					held = append(held, v)
				}
			}
			if !slices.Equal(held, tc.held) || s.Len() != len(tc.held) {
				t.Fatalf("held %v (Len %d), want %v", held, s.Len(), tc.held)
			}
		})
	}
}

// TestSnapshotsLifetime: Get honours the expiry, Extend moves it, Remove
// and Clear forget.
func TestSnapshotsLifetime(t *testing.T) {
	s := NewSnapshots[int](4, 0)
	t0 := time.Unix(1_800_000_000, 0)
	s.Add("x", "a", 1, t0, t0.Add(time.Minute))
	s.Add("y", "a", 2, t0, t0.Add(time.Minute))
	if _, ok := s.Get("x", t0.Add(time.Minute)); ok {
		t.Fatal("x held at its expiry")
	}
	s.Extend("x", t0.Add(2*time.Minute))
	if v, ok := s.Get("x", t0.Add(time.Minute)); !ok || v != 1 {
		t.Fatalf("extended x: %d %v", v, ok)
	}
	if v, ok := s.Remove("x"); !ok || v != 1 {
		t.Fatalf("remove x: %d %v", v, ok)
	}
	if _, ok := s.Remove("x"); ok {
		t.Fatal("x removed twice")
	}
	if got := s.Clear(); !slices.Equal(got, []int{2}) || s.Len() != 0 {
		t.Fatalf("clear: %v, Len %d", got, s.Len())
	}
}
