package badger

import (
	"slices"
	"testing"
)

// TestSlabChunksGrow: a batch's first records come from a small chunk and
// its chunks grow to 1 MiB, so a fleet's many small batches in flight hold
// little; records never overlap, and a record over an eighth of the largest
// chunk is allocated on its own.
func TestSlabChunksGrow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		records []int // sizes, in order
		classes []int // the chunks' classes after them
	}{
		{"one small record", []int{3500}, []int{0}},
		{"a small batch fits its first chunk", slices.Repeat([]int{3000}, 21), []int{0}},
		{"a big batch grows to 1 MiB chunks", slices.Repeat([]int{4000}, 300), []int{0, 1, 2}},
		{"and stays at 1 MiB", slices.Repeat([]int{4000}, 400), []int{0, 1, 2, 2}},
		{"a record too big for the next class skips to one it fits", []int{100, 100 << 10}, []int{0, 2}},
		{"a record over 128 KiB takes no chunk", []int{200 << 10}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &slab{pools: newSlabPools()}
			var got [][]byte
			for _, n := range tc.records {
				b := s.alloc(n)
				if len(b) != 0 || cap(b) != n {
					t.Fatalf("alloc(%d): len %d cap %d", n, len(b), cap(b))
				}
				b = append(b, make([]byte, n)...)
				for i := range b {
					b[i] = byte(len(got))
				}
				got = append(got, b)
			}
			for i, b := range got {
				for _, c := range b {
					if c != byte(i) {
						t.Fatalf("record %d was overwritten by a later one", i)
					}
				}
			}
			var classes []int
			for _, c := range s.chunks {
				if len(*c.b) != slabSize(c.class) {
					t.Fatalf("chunk of class %d holds %d bytes, want %d", c.class, len(*c.b), slabSize(c.class))
				}
				classes = append(classes, c.class)
			}
			if !slices.Equal(classes, tc.classes) {
				t.Fatalf("chunk classes %v, want %v", classes, tc.classes)
			}
			s.release()
			if s.chunks != nil || s.cur != nil {
				t.Fatal("release kept chunks")
			}
		})
	}
	if got := []int{slabSize(0), slabSize(1), slabSize(2)}; !slices.Equal(got, []int{64 << 10, 256 << 10, slabChunk}) {
		t.Fatalf("chunk sizes %v", got)
	}
}
