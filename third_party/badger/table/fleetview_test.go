/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

// fleetview patch: tests of the in-block seek (not an upstream file; the
// fork check ignores test files, CI runs this one on upstream's module,
// whose table_test.go has buildTestTable).

package table

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
)

// TestSeekInBlockAgreesWithIndexSearch seeks one iterator through many
// blocks in the orders a merge iterator sees (ascending with small gaps,
// interleaved with Next, backwards, random, between keys, past either
// end) and checks every outcome against the sorted keys.
func TestSeekInBlockAgreesWithIndexSearch(t *testing.T) {
	const n = 10000
	tbl := buildTestTable(t, "k", n, getTestTableOptions())
	defer func() { _ = tbl.DecrRef() }()
	if tbl.offsetsLength() < 10 {
		t.Fatalf("%d blocks: the test needs many", tbl.offsetsLength())
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key("k", i)
	}
	// want is the first key >= in, or "" when there is none.
	want := func(in string) string {
		i := sort.SearchStrings(keys, in)
		if i == n {
			return ""
		}
		return keys[i]
	}
	rng := rand.New(rand.NewSource(1))
	var seeks []string
	for i := 0; i < n; i += 1 + rng.Intn(12) { // ascending, nearby
		seeks = append(seeks, keys[i])
		if rng.Intn(4) == 0 {
			seeks = append(seeks, keys[i]+"b") // between two keys
		}
	}
	for i := n - 1; i >= 0; i -= 1 + rng.Intn(40) { // descending
		seeks = append(seeks, keys[i])
	}
	for range 2000 { // anywhere
		seeks = append(seeks, fmt.Sprintf("k%04d", rng.Intn(n+50)))
	}
	seeks = append(seeks, "a", "k", "z", keys[n-1], keys[n-1]+"b", keys[0])

	it := tbl.NewIterator(0)
	defer it.Close()
	inBlock := 0
	for i, in := range seeks {
		k := y.KeyWithTs([]byte(in), 0)
		if len(it.bi.data) > 0 && it.bi.blockID == it.bpos {
			inBlock++
		}
		it.Seek(k)
		w := want(in)
		if w == "" {
			if it.Valid() {
				t.Fatalf("seek %d to %q: got %q, want the end", i, in, y.ParseKey(it.Key()))
			}
			continue
		}
		if !it.Valid() || string(y.ParseKey(it.Key())) != w {
			t.Fatalf("seek %d to %q: got valid=%v %q, want %q", i, in, it.Valid(), y.ParseKey(it.Key()), w)
		}
		// A Next (across a block's end too) must continue from there.
		if rng.Intn(3) == 0 {
			for range rng.Intn(90) {
				it.Next()
				j := sort.SearchStrings(keys, w) + 1
				if j == n {
					if it.Valid() {
						t.Fatalf("next after %q: got %q, want the end", w, y.ParseKey(it.Key()))
					}
					break
				}
				if !it.Valid() || string(y.ParseKey(it.Key())) != keys[j] {
					t.Fatalf("next after %q: got valid=%v %q, want %q", w, it.Valid(), y.ParseKey(it.Key()), keys[j])
				}
				w = keys[j]
			}
		}
	}
	if inBlock < len(seeks)/2 {
		t.Fatalf("only %d of %d seeks started from a loaded block: the path is not exercised", inBlock, len(seeks))
	}

	// A reversed iterator seeks through seekFrom too (then steps back).
	rit := tbl.NewIterator(REVERSED)
	defer rit.Close()
	for i := n - 1; i >= 0; i -= 1 + rng.Intn(12) {
		in := keys[i] + "b"
		rit.Seek(y.KeyWithTs([]byte(in), 0))
		if !rit.Valid() || string(y.ParseKey(rit.Key())) != keys[i] {
			t.Fatalf("reversed seek to %q: got valid=%v %q, want %q", in, rit.Valid(), y.ParseKey(rit.Key()), keys[i])
		}
	}
}
