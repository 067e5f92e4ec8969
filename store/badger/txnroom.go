package badger

import (
	"bytes"

	bdg "github.com/dgraph-io/badger/v4"
)

// txnBudget is a transaction's entries and bytes as Badger's checkSize
// estimates them.
type txnBudget struct{ n, size int64 }

const (
	// ckptRoomEntries and ckptRoomBytes are kept free for a transaction's
	// checkpoint, the history's byte counter written with it
	// (saveHistory), and the entry Badger counts for every transaction.
	ckptRoomEntries = 3
	ckptRoomBytes   = 256
	// valueThreshold is the store's (Open: WithValueThreshold).
	valueThreshold = 1 << 10
)

// room refuses an entry (ErrTxnTooBig, as Badger would) once the
// transaction is within a checkpoint's room of Badger's limits, except
// the checkpoint's own: a batch too big for one transaction is committed
// in prefixes (Apply), each with its checkpoint, and that checkpoint must
// still fit after the entry that did not. Without the room, the entry
// that hit the limit left none for it: more entries per object, as the
// value index adds, made that the common case at small memtables
// (TestRemovalLargerThanATransaction). vlen is the value's length.
func (w *writer) room(k []byte, vlen int) error {
	if bytes.HasPrefix(k, ckptPrefix) {
		return nil
	}
	return w.reserve(1, entrySize(k, vlen))
}

// entrySize is what one entry (k, a value of vlen bytes) counts toward
// Badger's transaction size.
func entrySize(k []byte, vlen int) int64 {
	e := int64(len(k)) + 12 + 2 + 10 // a value pointer, metas, the key's version
	if vlen < valueThreshold {
		e = int64(len(k)+vlen) + 2 + 10
	}
	return e
}

// reserve takes room for n entries of size bytes in all, or none of it:
// a write that must land with others (counters.go) asks for all at once.
func (w *writer) reserve(n, size int64) error {
	if w.budget.n+n >= w.s.db.MaxBatchCount()-ckptRoomEntries || w.budget.size+size >= w.s.db.MaxBatchSize()-ckptRoomBytes {
		return bdg.ErrTxnTooBig
	}
	w.budget.n += n
	w.budget.size += size
	return nil
}
