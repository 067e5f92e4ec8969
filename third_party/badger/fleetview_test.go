/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

// fleetview patch: tests of Entry.WithValueThreshold and
// Txn.ReserveWrites (not an upstream file; the fork check ignores test
// files, CI runs this one).

package badger

import (
	"bytes"
	"fmt"
	"testing"
)

// TestFleetviewEntryValueThreshold: an entry's own threshold decides where
// its value goes (value log or LSM tree), against the DB's, and the value
// reads back the same before and after a reopen (the write-ahead log
// replayed, then the memtable flushed).
func TestFleetviewEntryValueThreshold(t *testing.T) {
	dir := t.TempDir()
	opt := DefaultOptions(dir).WithValueThreshold(1 << 10).WithLogger(nil)
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	small, big := bytes.Repeat([]byte("s"), 100), bytes.Repeat([]byte("b"), 2000)
	cases := []struct {
		key   string
		entry *Entry
		vlog  bool
	}{
		{"small-default", NewEntry([]byte("small-default"), small), false},
		{"small-forced", NewEntry([]byte("small-forced"), small).WithValueThreshold(1), true},
		{"big-default", NewEntry([]byte("big-default"), big), true},
		{"big-kept", NewEntry([]byte("big-kept"), big).WithValueThreshold(1 << 20), false},
	}
	if err := db.Update(func(txn *Txn) error {
		for _, c := range cases {
			if err := txn.SetEntry(c.entry); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if err := db.View(func(txn *Txn) error {
			for i, c := range cases {
				item, err := txn.Get([]byte(c.key))
				if err != nil {
					return err
				}
				if got := item.meta&bitValuePointer != 0; got != c.vlog {
					t.Errorf("%s: %s in the value log: %v, want %v", when, c.key, got, c.vlog)
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if want := [][]byte{small, small, big, big}[i]; !bytes.Equal(v, want) {
					t.Errorf("%s: %s reads back %d bytes, want %d", when, c.key, len(v), len(want))
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("written")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(opt); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("reopened")
}

// TestFleetviewTxnReserveWrites: a transaction sized before its first
// entry holds, commits and reads back the same entries as one that is
// not, also past the size it reserved, and a reservation after the
// first entry, on a read-only transaction or beyond the transaction's
// limit keeps what the transaction holds.
func TestFleetviewTxnReserveWrites(t *testing.T) {
	db, err := Open(DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		name    string
		reserve int
		after   bool // reserve after the first entry
		entries int
	}{
		{"none", 0, false, 100},
		{"exact", 100, false, 100},
		{"short", 10, false, 100},
		{"past the limit", 1 << 40, false, 100},
		{"negative", -5, false, 100},
		{"after an entry", 1000, true, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			txn := db.NewTransaction(true)
			defer txn.Discard()
			key := func(i int) []byte { return []byte(fmt.Sprintf("%s/%04d", c.name, i)) }
			if !c.after {
				txn.ReserveWrites(c.reserve)
			}
			for i := 0; i < c.entries; i++ {
				if err := txn.Set(key(i), key(i)); err != nil {
					t.Fatal(err)
				}
				if i == 0 && c.after {
					txn.ReserveWrites(c.reserve)
				}
			}
			if got := len(txn.pendingWrites); got != c.entries {
				t.Fatalf("%d pending writes, want %d", got, c.entries)
			}
			if err := txn.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := db.View(func(txn *Txn) error {
				for i := 0; i < c.entries; i++ {
					item, err := txn.Get(key(i))
					if err != nil {
						return fmt.Errorf("%s: %w", key(i), err)
					}
					v, err := item.ValueCopy(nil)
					if err != nil {
						return err
					}
					if !bytes.Equal(v, key(i)) {
						t.Errorf("%s reads back %q", key(i), v)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	ro := db.NewTransaction(false)
	defer ro.Discard()
	ro.ReserveWrites(10)
	if ro.pendingWrites != nil {
		t.Error("a read-only transaction got a table of pending writes")
	}
}
