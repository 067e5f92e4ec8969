package badger

import "sync"

// slab hands out the memory of one batch's records from a few large chunks
// that are reused once Badger has copied the records (into the value log
// or a memtable) — that is, once the commit is done or the transaction
// discarded. A record per event was the largest allocation of a pipelined
// apply (a Pod's size per event), and the garbage collector ran for it.
//
// A slab's chunks grow (64 KiB, 256 KiB, then 1 MiB each): every cluster's
// stream has a batch in flight, and a fleet's batches are mostly small (a
// cluster's few changes, or its 50 objects at sync). With 1 MiB from the
// first record, a syncing fleet's mostly empty chunks were a large share
// of the hub's memory per cluster (measured:
// docs/benchmarks/fleet.md#where-a-clusters-memory-goes-600-clusters-2026-12-03-later);
// a batch of a million Pods still fills 1 MiB chunks after its first two.
type slab struct {
	pools  *slabPools
	chunks []slabChunkOf
	cur    []byte
}

// slabChunkOf is a chunk and the class whose pool it returns to.
type slabChunkOf struct {
	b     *[]byte
	class int
}

// A slab's n-th chunk is of class min(n, slabClasses-1), slabSize(class)
// bytes: 64 KiB, 256 KiB, 1 MiB.
const slabClasses = 3

func slabSize(class int) int { return 64 << 10 << (2 * class) }

// slabChunk is the largest chunk: records over an eighth of it are
// allocated on their own.
const slabChunk = 1 << 20

// slabPools holds the free chunks of each class.
type slabPools [slabClasses]sync.Pool

func newSlabPools() *slabPools {
	p := &slabPools{}
	for i := range p {
		size := slabSize(i)
		p[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
	return p
}

// alloc returns an empty slice with capacity n.
func (s *slab) alloc(n int) []byte {
	if s == nil || n > slabChunk/8 {
		return make([]byte, 0, n)
	}
	if cap(s.cur)-len(s.cur) < n {
		class := min(len(s.chunks), slabClasses-1)
		for slabSize(class)/8 < n {
			class++
		}
		c := s.pools[class].Get().(*[]byte)
		s.chunks = append(s.chunks, slabChunkOf{b: c, class: class})
		s.cur = (*c)[:0]
	}
	b := s.cur[len(s.cur) : len(s.cur) : len(s.cur)+n]
	s.cur = s.cur[:len(s.cur)+n]
	return b
}

// release returns the chunks for reuse: nothing may read the records after.
func (s *slab) release() {
	if s == nil {
		return
	}
	for _, c := range s.chunks {
		s.pools[c.class].Put(c.b)
	}
	s.chunks, s.cur = nil, nil
}
