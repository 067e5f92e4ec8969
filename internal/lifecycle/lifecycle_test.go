package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// journal records start and stop events in the order they happen.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) add(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// component records "start <name>" when it runs and "stop <name>" when it
// returns; it returns err once ctx ends, or failAfter its start if set.
func (j *journal) component(name string, failAfter time.Duration, err error) Runnable {
	return Func(func(ctx context.Context) error {
		j.add("start " + name)
		defer j.add("stop " + name)
		if failAfter > 0 {
			select {
			case <-time.After(failAfter):
				return err
			case <-ctx.Done():
				return nil
			}
		}
		<-ctx.Done()
		return err
	})
}

var errBoom = errors.New("boom")

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// groups builds the lifecycle's groups recording into j.
		groups func(j *journal) []Group
		stop   [][]string
		// cancelAfter ends the parent context (0: never).
		cancelAfter time.Duration
		want        []string
		wantErr     error
	}{{
		name: "start in order, stop in reverse by default",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: waitFor(j, "start nats")},
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}, Ready: waitFor(j, "start store")},
				{Name: "api", Runnables: []Runnable{j.component("api", 0, nil)}, Ready: waitFor(j, "start api")},
			}
		},
		cancelAfter: 20 * time.Millisecond,
		want:        []string{"start nats", "start store", "start api", "stop api", "stop store", "stop nats"},
	}, {
		name: "stated stop order: each stage awaited before the next",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: waitFor(j, "start nats")},
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}, Ready: waitFor(j, "start store")},
				{Name: "api", Runnables: []Runnable{j.component("api", 0, nil)}, Ready: waitFor(j, "start api")},
				{Name: "collectors", Runnables: []Runnable{j.component("collectors", 0, nil)}, Ready: waitFor(j, "start collectors")},
			}
		},
		stop:        [][]string{{"api"}, {"collectors"}, {"store"}, {"nats"}},
		cancelAfter: 20 * time.Millisecond,
		want:        []string{"start nats", "start store", "start api", "start collectors", "stop api", "stop collectors", "stop store", "stop nats"},
	}, {
		name: "an error in one runnable stops the others in stop order",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: waitFor(j, "start nats")},
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}, Ready: waitFor(j, "start store")},
				{Name: "api", Runnables: []Runnable{j.component("api", 20*time.Millisecond, errBoom)}, Ready: waitFor(j, "start api")},
			}
		},
		want:    []string{"start nats", "start store", "start api", "stop api", "stop store", "stop nats"},
		wantErr: errBoom,
	}, {
		name: "the first error wins over one returned while stopping",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "store", Runnables: []Runnable{j.component("store", 0, errors.New("close failed"))}, Ready: waitFor(j, "start store")},
				{Name: "api", Runnables: []Runnable{j.component("api", 20*time.Millisecond, errBoom)}, Ready: waitFor(j, "start api")},
			}
		},
		want:    []string{"start store", "start api", "stop api", "stop store"},
		wantErr: errBoom,
	}, {
		name: "a failed build stops what started and starts nothing after it",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: waitFor(j, "start nats")},
				{Name: "store", Build: func(context.Context) ([]Runnable, error) {
					return []Runnable{j.component("store", 0, nil)}, nil
				}, Ready: waitFor(j, "start store")},
				{Name: "api", Build: func(context.Context) ([]Runnable, error) { return nil, errBoom }},
				{Name: "collectors", Runnables: []Runnable{j.component("collectors", 0, nil)}},
			}
		},
		want:    []string{"start nats", "start store", "stop store", "stop nats"},
		wantErr: errBoom,
	}, {
		name: "a failed readiness stops the run",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: func(ctx context.Context) error {
					if err := waitFor(j, "start nats")(ctx); err != nil {
						return err
					}
					return errBoom
				}},
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}},
			}
		},
		want:    []string{"start nats", "stop nats"},
		wantErr: errBoom,
	}, {
		name: "the parent's end during a readiness wait stops the run without an error",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}, Ready: func(ctx context.Context) error {
					<-ctx.Done()
					return nil
				}},
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}},
			}
		},
		cancelAfter: 20 * time.Millisecond,
		want:        []string{"start nats", "stop nats"},
	}, {
		name: "a runnable that returns nil early does not stop the others",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}, Ready: waitFor(j, "start store")},
				{Name: "once", Runnables: []Runnable{j.component("once", time.Millisecond, nil)}, Ready: waitFor(j, "stop once")},
			}
		},
		cancelAfter: 30 * time.Millisecond,
		want:        []string{"start store", "start once", "stop once", "stop store"},
	}, {
		name: "closers close in their group's turn, in the order given",
		groups: func(j *journal) []Group {
			return []Group{
				{Name: "nats", Runnables: []Runnable{Closer(
					func() error { j.add("close conn"); return nil },
					func() error { j.add("shut down server"); return nil },
				)}},
				{Name: "api", Runnables: []Runnable{j.component("api", 0, nil)}, Ready: waitFor(j, "start api")},
			}
		},
		cancelAfter: 20 * time.Millisecond,
		want:        []string{"start api", "stop api", "close conn", "shut down server"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancelAfter > 0 {
				time.AfterFunc(tc.cancelAfter, cancel)
			}
			err := Lifecycle{Groups: tc.groups(j), Stop: tc.stop}.Run(ctx)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Run = %v, want %v", err, tc.wantErr)
			}
			if got := j.get(); !slices.Equal(got, tc.want) {
				t.Fatalf("events:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestStopStagesAtOnce: a stage's groups stop together (each holds its
// stop until the other has been asked to stop), and the next stage waits
// for the whole stage.
func TestStopStagesAtOnce(t *testing.T) {
	j := &journal{}
	aStopping, bStopping := make(chan struct{}), make(chan struct{})
	// Each of a and b returns only once both were cancelled: stopped one
	// after the other, the run would hang.
	pair := func(name string, mine, other chan struct{}) Runnable {
		return Func(func(ctx context.Context) error {
			<-ctx.Done()
			close(mine)
			<-other
			j.add("stop " + name)
			return nil
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Lifecycle{
			Groups: []Group{
				{Name: "store", Runnables: []Runnable{j.component("store", 0, nil)}, Ready: waitFor(j, "start store")},
				{Name: "api", Runnables: []Runnable{pair("api", aStopping, bStopping)}},
				{Name: "collectors", Runnables: []Runnable{pair("collectors", bStopping, aStopping)}, Ready: func(context.Context) error {
					cancel()
					return nil
				}},
			},
			Stop: [][]string{{"api", "collectors"}, {"store"}},
		}.Run(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stage's groups were not stopped at once")
	}
	want := []string{"start store", "stop api", "stop collectors", "stop store"}
	if got := j.get(); len(got) != 4 || got[0] != want[0] || got[3] != want[3] {
		t.Fatalf("events %q, want %q (api and collectors in either order)", got, want)
	}
}

// TestRunStartsNothingAfterParentEnded: a parent that ended before Run
// starts nothing and returns at once.
func TestRunStartsNothingAfterParentEnded(t *testing.T) {
	j := &journal{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	built := false
	err := Lifecycle{Groups: []Group{
		{Name: "nats", Runnables: []Runnable{j.component("nats", 0, nil)}},
		{Name: "store", Build: func(context.Context) ([]Runnable, error) { built = true; return nil, nil }},
	}}.Run(ctx)
	if err != nil || built || len(j.get()) != 0 {
		t.Fatalf("Run = %v, built %v, events %q; want nothing started", err, built, j.get())
	}
}

// TestRunKeepsValuesButNotCancellation: runnables see the parent's values,
// and their context ends only in their stage.
func TestRunKeepsValuesButNotCancellation(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
	storeSawAPIStopped := false
	apiStopped := make(chan struct{})
	err := Lifecycle{Groups: []Group{
		{Name: "store", Runnables: []Runnable{Func(func(ctx context.Context) error {
			if ctx.Value(key{}) != "v" {
				return errors.New("no value")
			}
			<-ctx.Done()
			select {
			case <-apiStopped:
				storeSawAPIStopped = true
			default:
			}
			return nil
		})}},
		{Name: "api", Runnables: []Runnable{Func(func(ctx context.Context) error {
			defer close(apiStopped)
			cancel()
			<-ctx.Done()
			return nil
		})}},
	}}.Run(ctx)
	if err != nil || !storeSawAPIStopped {
		t.Fatalf("Run = %v, store saw the API stopped: %v", err, storeSawAPIStopped)
	}
}

func TestRunRejectsInvalidOrder(t *testing.T) {
	groups := []Group{{Name: "a"}, {Name: "b"}}
	for _, tc := range []struct {
		name   string
		groups []Group
		stop   [][]string
	}{
		{"unknown group", groups, [][]string{{"a"}, {"b", "c"}}},
		{"group twice", groups, [][]string{{"a"}, {"b", "a"}}},
		{"group missing", groups, [][]string{{"a"}}},
		{"duplicate names", []Group{{Name: "a"}, {Name: "a"}}, nil},
		{"empty name", []Group{{Name: ""}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := (Lifecycle{Groups: tc.groups, Stop: tc.stop}).Run(t.Context()); !errors.Is(err, ErrOrder) {
				t.Fatalf("Run = %v, want ErrOrder", err)
			}
		})
	}
}

// waitFor is a readiness that waits until j has recorded event, so the
// journal's start order is the lifecycle's and not the scheduler's.
func waitFor(j *journal, event string) func(context.Context) error {
	return func(ctx context.Context) error {
		for !slices.Contains(j.get(), event) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
}
