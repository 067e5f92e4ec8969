package watchhub

import (
	"context"
	"sync"
)

// Queue is a bounded FIFO between one producer side and one consumer
// goroutine: a watch's outbox and a hub subscription. It is a slice, not
// a buffered channel, because a channel's buffer is allocated at its full
// capacity and the garbage collector scans all of it on every cycle: with
// 1,000 watches the idle buffers were hundreds of megabytes to scan, and
// the scans delayed every watch's events (measured:
// docs/benchmarks/query.md#time-to-the-last-byte-the-kubernetes-api-2026-12-01).
// A queue holds only what is queued.
type Queue[T any] struct {
	mu    sync.Mutex
	items []T // queued from head on
	head  int
	limit int
	// ready has a token while items may be non-empty; space has one after
	// a take, for a producer waiting in push.
	ready, space chan struct{}
}

// NewQueue returns a queue of at most limit items.
func NewQueue[T any](limit int) *Queue[T] {
	return &Queue[T]{limit: limit, ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// Ready has a value while items may be queued: after it, Pop until it
// reports none.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// TryPush queues v unless the queue is full.
func (q *Queue[T]) TryPush(v T) bool {
	q.mu.Lock()
	if len(q.items)-q.head >= q.limit {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
	signal(q.ready)
	return true
}

// Push queues v, waiting for room until ctx ends.
func (q *Queue[T]) Push(ctx context.Context, v T) error {
	for !q.TryPush(v) {
		select {
		case <-q.space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Pop takes the oldest item, if any.
func (q *Queue[T]) Pop() (T, bool) {
	var zero T
	q.mu.Lock()
	if q.head == len(q.items) {
		q.mu.Unlock()
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		if cap(q.items) > 1024 {
			// A burst grew it: let it go rather than keep the peak.
			q.items = nil
		}
	}
	q.mu.Unlock()
	signal(q.space)
	return v, true
}

// Len is how many items are queued.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
