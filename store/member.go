package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/fleetview/fleetview/materializer"
)

// member is one backend and its materializer, which the mover pauses
// while it copies resources in or deletes them.
type member struct {
	id string
	// name is its name for people (backendName).
	name string
	b    Backend
	mat  *materializer.Materializer
	// versioned: the store keeps each object's stream sequence as its
	// version and refuses a write that does not exceed it
	// (Capabilities.Versioned).
	versioned bool
	// closed: Close closed b (under the set's mu).
	closed bool

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs the materializer unless it runs already; a failure goes to
// fail (which ends serve).
func (m *member) start(ctx context.Context, fail func(error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m.cancel, m.done = cancel, done
	go func() {
		defer close(done)
		// A paused or stopped member ends with its context: not a failure.
		if err := m.mat.Run(cctx); err != nil && cctx.Err() == nil {
			fail(fmt.Errorf("materializer of backend %q: %w", m.id, err))
		}
	}()
}

// pause stops the materializer and waits until every batch it took is
// committed (or abandoned): then the sink and its checkpoints are the
// mover's alone.
func (m *member) pause() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel, m.done = nil, nil
}
