package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/fleetview/fleetview/materializer"
)

// member is one backend: its sink, its reader and its materializer, which
// the mover pauses while it copies resources in or deletes them.
type member struct {
	id   string
	sink materializer.Sink
	read backendReader
	mat  *materializer.Materializer
	// versioned: the sink keeps each object's stream sequence as its
	// version and refuses a write that does not exceed it (OpenSearch).
	versioned bool

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
