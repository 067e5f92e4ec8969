package badger

import (
	"errors"
	"fmt"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/materializer"
)

// buildSearchIndex gives every object of a store written before the search
// index existed its search key, and marks the store indexed; a store
// already marked (every store created since) costs one read. It runs in
// Open, before anything reads or writes the store. Interrupted, it starts
// over at the next Open: the marker is written after the last key.
func (s *Store) buildSearchIndex() error {
	err := s.db.View(func(txn *bdg.Txn) error {
		_, err := txn.Get(searchIndexedKey)
		return err
	})
	if err == nil {
		return nil
	}
	if !errors.Is(err, bdg.ErrKeyNotFound) {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	n := 0
	err = s.db.View(func(txn *bdg.Txn) error {
		// Values read in place: prefetching starts a goroutine per item.
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'o', sep}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			var text []byte
			if err := item.Value(func(v []byte) error {
				rec, err := decodeRecord(v, false)
				if err != nil {
					return err
				}
				text, err = materializer.SearchText(rec.json)
				return err
			}); err != nil {
				return fmt.Errorf("search index of %q: %w", item.Key(), err)
			}
			if err := wb.SetEntry(searchEntry(retag(nil, item.Key(), 's'), text)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := wb.Set(searchIndexedKey, nil); err != nil {
		return err
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if n > 0 && s.log != nil {
		s.log.Info("built the search index of a store written before it", "objects", n)
	}
	return nil
}
