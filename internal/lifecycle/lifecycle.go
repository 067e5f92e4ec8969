package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Runnable is a component. Run blocks until ctx ends or the component
// fails, and releases what the component holds before it returns; it
// returns nil when ctx ended and it stopped cleanly.
type Runnable interface {
	Run(ctx context.Context) error
}

// Func is a function as a Runnable.
type Func func(ctx context.Context) error

// Run calls f.
func (f Func) Run(ctx context.Context) error { return f(ctx) }

// Closer holds what a group's Build opened (a connection, a server that
// runs by itself) until the group stops, then closes it, in the order
// given: what has no Run of its own still takes its place in the stop
// order.
func Closer(closes ...func() error) Runnable {
	return Func(func(ctx context.Context) error {
		<-ctx.Done()
		var errs []error
		for _, c := range closes {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	})
}

// Group is components started together and stopped together.
type Group struct {
	// Name names the group in the stop order.
	Name string
	// Build, when set, makes the group's components once the groups
	// before it are started (and ready); what it returns runs with
	// Runnables. Its context ends when the run stops. An error stops the
	// run: the groups already started stop in stop order, later groups
	// are neither built nor started.
	Build func(ctx context.Context) ([]Runnable, error)
	// Runnables are the group's components made before the run.
	Runnables []Runnable
	// Ready, when set, is waited for once the group's runnables are
	// started and before the next group is built: what the next group
	// needs from this one. It must return when its context ends; an error
	// stops the run.
	Ready func(ctx context.Context) error
}

// Lifecycle is groups in start order and the order they stop in.
type Lifecycle struct {
	// Groups start in this order.
	Groups []Group
	// Stop is the stop order: stages of group names, each stage's groups
	// stopped at once (their runnables' contexts cancelled) and their
	// runnables awaited before the next stage's. Every group is in
	// exactly one stage. Nil stops the groups one at a time in reverse
	// start order.
	Stop [][]string
}

// Run starts the groups in order and, once ctx ends or anything fails,
// stops the started ones in stop order. It returns the first error, as
// given, of a Build, a Ready or a runnable (one returning an error while
// stopping included; errgroup's rule), nil if none.
//
// A runnable's context carries ctx's values but ends only when its
// group's stage stops: a component outlives the end of ctx until what
// must stop before it has.
func (l Lifecycle) Run(ctx context.Context) error {
	stages, err := l.stopStages()
	if err != nil {
		return err
	}
	r := &run{stopping: make(chan struct{})}
	// Build and Ready end with the run: a parent that ends, or a failure.
	buildCtx, cancelBuild := context.WithCancel(ctx)
	defer cancelBuild()
	go func() {
		select {
		case <-buildCtx.Done():
			r.fail(nil)
		case <-r.stopping:
			cancelBuild()
		}
	}()
	started := make(map[string]*running, len(l.Groups))
	for _, g := range l.Groups {
		if buildCtx.Err() != nil {
			r.fail(nil) // the watcher may not have seen it yet
			break
		}
		rs := g.Runnables
		if g.Build != nil {
			built, err := g.Build(buildCtx)
			if err != nil {
				r.fail(err)
				break
			}
			rs = append(rs[:len(rs):len(rs)], built...)
		}
		started[g.Name] = r.start(context.WithoutCancel(ctx), rs)
		if g.Ready != nil {
			if err := g.Ready(buildCtx); err != nil {
				r.fail(err)
				break
			}
		}
	}
	<-r.stopping
	for _, stage := range stages {
		for _, name := range stage {
			if s := started[name]; s != nil {
				s.cancel()
			}
		}
		for _, name := range stage {
			if s := started[name]; s != nil {
				s.wg.Wait()
			}
		}
	}
	return r.err
}

// stopStages is l.Stop checked against the groups, or its default.
func (l Lifecycle) stopStages() ([][]string, error) {
	names := make(map[string]bool, len(l.Groups))
	for _, g := range l.Groups {
		if g.Name == "" || names[g.Name] {
			return nil, fmt.Errorf("%w: group name %q empty or given twice", ErrOrder, g.Name)
		}
		names[g.Name] = true
	}
	if l.Stop == nil {
		stages := make([][]string, 0, len(l.Groups))
		for i := len(l.Groups) - 1; i >= 0; i-- {
			stages = append(stages, []string{l.Groups[i].Name})
		}
		return stages, nil
	}
	seen := make(map[string]bool, len(names))
	for _, stage := range l.Stop {
		for _, name := range stage {
			if !names[name] || seen[name] {
				return nil, fmt.Errorf("%w: stop order names %q, which is no group or given twice", ErrOrder, name)
			}
			seen[name] = true
		}
	}
	if len(seen) != len(names) {
		for n := range names {
			if !seen[n] {
				return nil, fmt.Errorf("%w: group %q is in no stop stage", ErrOrder, n)
			}
		}
	}
	return l.Stop, nil
}

// run is one Run's shared state: the first error and whether it stops.
type run struct {
	mu       sync.Mutex
	err      error
	once     sync.Once
	stopping chan struct{}
}

// fail records err if it is the first and starts stopping.
func (r *run) fail(err error) {
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	r.once.Do(func() { close(r.stopping) })
}

// running is a started group's runnables.
type running struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// start runs rs, each on a context of its own group's; one returning an
// error stops the run.
func (r *run) start(parent context.Context, rs []Runnable) *running {
	ctx, cancel := context.WithCancel(parent)
	s := &running{cancel: cancel}
	for _, rn := range rs {
		s.wg.Go(func() {
			if err := rn.Run(ctx); err != nil {
				r.fail(err)
			}
		})
	}
	return s
}
