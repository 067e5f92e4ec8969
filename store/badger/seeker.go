package badger

import (
	"bytes"

	bdg "github.com/dgraph-io/badger/v4"
)

// maxSteps is how many keys seek steps over with Next before it seeks: a
// seek in a deep LSM tree (every level-0 table and one table per level)
// costs about as much as tens of steps.
const maxSteps = 16

// seeker positions an iterator at the first key at or after each target,
// remembering where no key is, so that targets taken in rising order (the
// reverse prefixes of a namespace's Pods, a selection's E/ entries) cost a
// few steps or nothing instead of a seek each: the reverse prefixes of
// most Pods hold no key, and one seek past the first shows it for the
// rest.
type seeker struct {
	it *bdg.Iterator
	// lo: no key lies in [lo, the iterator's key) (the iterator invalid:
	// none at or after lo); nil before the first seek.
	lo []byte
}

func newSeeker(txn *bdg.Txn) *seeker {
	return &seeker{it: txn.NewIterator(bdg.IteratorOptions{})}
}

// newSeekerIn is a seeker over the keys under prefix, for targets under
// it: past its last key the iterator is invalid, which says, as at the
// end of the store, that no key lies at or after lo.
func newSeekerIn(txn *bdg.Txn, prefix []byte) *seeker {
	return &seeker{it: txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})}
}

func (s *seeker) close() { s.it.Close() }

// seek moves to the first key at or after t.
func (s *seeker) seek(t []byte) {
	if s.lo != nil && bytes.Compare(s.lo, t) <= 0 {
		for range maxSteps {
			if !s.it.Valid() || bytes.Compare(s.it.Item().Key(), t) >= 0 {
				return // the first key at or after lo, so at or after t
			}
			s.next()
		}
	}
	s.it.Seek(t)
	s.lo = append(s.lo[:0], t...)
}

// next moves to the next key.
func (s *seeker) next() {
	s.lo = append(append(s.lo[:0], s.it.Item().Key()...), 0)
	s.it.Next()
}

// each calls f with the keys under prefix (and their items, valid during
// the call only).
func (s *seeker) each(prefix []byte, f func(key []byte, it *bdg.Item) error) error {
	for s.seek(prefix); s.it.ValidForPrefix(prefix); s.next() {
		if err := f(s.it.Item().Key(), s.it.Item()); err != nil {
			return err
		}
	}
	return nil
}

// item is the item at key (valid until the next move), nil when there is
// none.
func (s *seeker) item(key []byte) *bdg.Item {
	if s.seek(key); !s.it.Valid() || !bytes.Equal(s.it.Item().Key(), key) {
		return nil
	}
	return s.it.Item()
}
