/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

// fleetview patch: tests of Entry.WithValueThreshold (not an upstream
// file; the fork check ignores test files, CI runs this one).

package badger

import (
	"bytes"
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
