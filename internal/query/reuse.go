package query

import (
	"context"
	"sync"
)

// Reuse lends the reads of one streamed answer the memory of the reads
// it has already written: a backend copies a read's objects into chunks
// it borrows here, and the caller, once it has written every object of
// the reads so far and holds none of them, calls Written, which makes
// those chunks free for the next read. A whole-fleet list read 5,000
// objects at a time otherwise copies every object into new memory (about
// 670 MB for 150k Pods), and that garbage, not the answer, grew the hub's
// heap to its collector's goal (docs/benchmarks/query.md).
//
// Only a caller that writes each read before it asks for the next may
// use it: an object of a read is overwritten by a read after Written. A
// nil *Reuse lends nothing (every method allocates as without it).
type Reuse struct {
	mu sync.Mutex
	// free chunks may be lent; lent chunks hold objects not yet written.
	free, lent [][]byte
	// items is an object slice a written read filled, lentItems the
	// one a read not yet written filled.
	items, lentItems []Object
}

// ReuseChunk is the size of every chunk a Reuse lends.
const ReuseChunk = 256 << 10

// Chunk lends an empty chunk of capacity ReuseChunk, one the caller has
// written when there is one, else a new one.
func (r *Reuse) Chunk() []byte {
	if r == nil {
		return make([]byte, 0, ReuseChunk)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var c []byte
	if n := len(r.free); n > 0 {
		c, r.free = r.free[n-1][:0], r.free[:n-1]
	} else {
		c = make([]byte, 0, ReuseChunk)
	}
	r.lent = append(r.lent, c)
	return c
}

// Items lends an empty object slice, with the capacity the last read's
// grew to: a read appends its objects to it rather than growing a new
// slice from nothing every time.
func (r *Reuse) Items() []Object {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	it := r.items[:0]
	r.items = nil
	return it
}

// KeepItems gives back the slice a read filled (Items), for a read
// after the next Written: its objects may be read until then.
func (r *Reuse) KeepItems(items []Object) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cap(items) > cap(r.lentItems) {
		r.lentItems = items
	}
}

// Written says the caller holds no object of the reads so far: their
// chunks are lent again.
func (r *Reuse) Written() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.free = append(r.free, r.lent...)
	clear(r.lent)
	r.lent = r.lent[:0]
	if cap(r.lentItems) > cap(r.items) {
		r.items = r.lentItems
	}
	r.lentItems = nil
}

type reuseKey struct{}

// WithReuse carries r with a read's context, so the query service can
// pass it to the backend (ListOptions.Reuse) from an in-process caller;
// a remote caller's context never carries one.
func WithReuse(ctx context.Context, r *Reuse) context.Context {
	return context.WithValue(ctx, reuseKey{}, r)
}

// ReuseFrom is the Reuse ctx carries (nil: none).
func ReuseFrom(ctx context.Context) *Reuse {
	r, _ := ctx.Value(reuseKey{}).(*Reuse)
	return r
}
