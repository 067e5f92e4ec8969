/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

// fleetview patch: tests of PutSequential (not an upstream file; the fork
// check ignores test files, CI runs this one).

package skl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
)

func seqKey(i int) []byte {
	return y.KeyWithTs([]byte(fmt.Sprintf("o/v1/pods/ns-%03d/pod-%07d", i%97, i)), 1)
}

// checkLevels verifies the structure: every level is in key order, and a
// node on level i is on level i-1 too.
func checkLevels(t *testing.T, s *Skiplist) {
	t.Helper()
	below := map[*node]bool{}
	for lvl := 0; lvl < int(s.getHeight()); lvl++ {
		here := map[*node]bool{}
		var prev []byte
		for n := s.getNext(s.head, lvl); n != nil; n = s.getNext(n, lvl) {
			k := n.key(s.arena)
			if prev != nil && y.CompareKeys(prev, k) >= 0 {
				t.Fatalf("level %d out of order: %q then %q", lvl, prev, k)
			}
			if lvl > 0 && !below[n] {
				t.Fatalf("node %q on level %d but not on level %d", k, lvl, lvl-1)
			}
			if int(n.height) <= lvl {
				t.Fatalf("node %q of height %d linked on level %d", k, n.height, lvl)
			}
			here[n] = true
			prev = k
		}
		below = here
	}
}

func TestPutSequential(t *testing.T) {
	const n = 20000
	orders := map[string]func() []int{
		"ascending": func() []int {
			o := make([]int, n)
			for i := range o {
				o[i] = i
			}
			return o
		},
		"random": func() []int { return rand.New(rand.NewSource(1)).Perm(n) },
		// What a memtable sees: sorted runs (commits), each spread over the
		// whole key space, interleaved with the runs before.
		"sorted runs": func() []int {
			r := rand.New(rand.NewSource(2))
			perm := r.Perm(n)
			var o []int
			for len(perm) > 0 {
				k := min(len(perm), 1+r.Intn(600))
				run := perm[:k]
				perm = perm[k:]
				sort.Slice(run, func(a, b int) bool { return bytes.Compare(seqKey(run[a]), seqKey(run[b])) < 0 })
				o = append(o, run...)
			}
			return o
		},
		"descending": func() []int {
			o := make([]int, n)
			for i := range o {
				o[i] = n - 1 - i
			}
			return o
		},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			s := NewSkiplist(seqArena(n))
			defer s.DecrRef()
			ord := order()
			for _, i := range ord {
				s.PutSequential(seqKey(i), y.ValueStruct{Value: []byte(fmt.Sprint(i)), Meta: 1})
			}
			// Overwrites (same key and version) change the value in place.
			for _, i := range ord[:n/10] {
				s.PutSequential(seqKey(i), y.ValueStruct{Value: []byte(fmt.Sprint("new", i)), Meta: 2})
			}
			checkLevels(t, s)
			want := map[string]string{}
			for _, i := range ord {
				want[string(seqKey(i))] = fmt.Sprint(i)
			}
			for _, i := range ord[:n/10] {
				want[string(seqKey(i))] = fmt.Sprint("new", i)
			}
			got := 0
			it := s.NewIterator()
			defer it.Close()
			var prev []byte
			for it.SeekToFirst(); it.Valid(); it.Next() {
				k := it.Key()
				if prev != nil && bytes.Compare(prev, k) >= 0 {
					t.Fatalf("iteration out of order: %q then %q", prev, k)
				}
				prev = y.SafeCopy(nil, k)
				if w, ok := want[string(k)]; !ok || w != string(it.Value().Value) {
					t.Fatalf("key %q: value %q, want %q (present %v)", k, it.Value().Value, w, ok)
				}
				got++
			}
			if got != n {
				t.Fatalf("%d keys iterated, want %d", got, n)
			}
			for k, w := range want {
				if v := s.Get([]byte(k)); string(v.Value) != w {
					t.Fatalf("Get(%q) = %q, want %q", k, v.Value, w)
				}
			}
		})
	}
}

// Readers run while the single writer puts (run with -race): each sees a
// prefix of the inserts, in order, and every key it finds has its value.
func TestPutSequentialConcurrentReaders(t *testing.T) {
	const n = 20000
	s := NewSkiplist(seqArena(n))
	defer s.DecrRef()
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				it := s.NewIterator()
				var prev []byte
				for it.SeekToFirst(); it.Valid(); it.Next() {
					k := it.Key()
					if prev != nil && bytes.Compare(prev, k) >= 0 {
						t.Errorf("iteration out of order: %q then %q", prev, k)
					}
					if want := binary.BigEndian.Uint64(k[len(k)-16 : len(k)-8]); binary.BigEndian.Uint64(it.Value().Value) != want {
						t.Errorf("key %q: wrong value", k)
					}
					prev = y.SafeCopy(prev, k)
				}
				it.Close()
			}
		}()
	}
	r := rand.New(rand.NewSource(3))
	perm := r.Perm(n)
	for len(perm) > 0 {
		k := min(len(perm), 1+r.Intn(600))
		run := perm[:k]
		perm = perm[k:]
		sort.Ints(run)
		for _, i := range run {
			v := binary.BigEndian.AppendUint64(nil, uint64(i))
			key := y.KeyWithTs(append([]byte("k/"), v...), 1)
			s.PutSequential(key, y.ValueStruct{Value: v})
		}
	}
	done.Store(true)
	wg.Wait()
	checkLevels(t, s)
}

func seqArena(n int) int64 { return int64(n) * int64(MaxNodeSize+64) }
