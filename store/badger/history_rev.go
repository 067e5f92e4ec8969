package badger

import (
	"encoding/binary"

	"github.com/fleetview/fleetview/internal/query"
)

// A history revision's value (r/ keys, doc.go): reverse deltas.

// revision is a stored revision (r/). Its state is rebuilt from the
// newer ones (reverse deltas): the newest revision of a live object
// stores no state, its state is the object the store holds (o/); an older
// one's state is its successor's state patched back by the successor's
// prev (a reverse merge patch), or prev itself when prevWhole (a
// snapshot, kept when the patches since the last one reach twice the
// object's bytes or SnapshotEvery revisions, chainCost, so any state
// reads with a bounded number of patch applications). own, when set, is the revision's state
// stored whole: a delete's last state, or an object whose current state
// left the store without a delete (its name reused, its resource
// removed). fwd is the forward patch from the previous state, the change
// the revision shows, stored by format 3 only: format 4 makes it from
// the reverse patch when read (forwardPatch). An added object thus costs
// no copy of itself, and an update one patch, not the object.
type revision struct {
	typ             query.ChangeType
	time            int64
	rv, manager, op string
	sub             string
	fwd             []byte
	prev            []byte // nil: no previous state kept
	prevWhole       bool
	own             []byte
}

// revFormat is the value's first byte: 4, whole states s2-compressed
// and no forward patch (made from the reverse one when read:
// forwardPatch). Format 3 (the same, the states plain and the forward
// patch stored) is still read; stores written before reverse deltas
// (forward patches, 1 and 2) are not: their history must be dropped
// (docs/history.md).
const (
	revFormat   = 4
	revFormatV3 = 3
)

const (
	revHasFwd = 1 << iota
	revHasPrev
	revPrevWhole
	revHasOwn
)

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func cutBytes(b []byte) ([]byte, []byte, error) {
	l, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < l {
		return nil, nil, errCorrupt
	}
	return b[w : w+int(l)], b[w+int(l):], nil
}

// encodeRevision writes r in the current format (its fwd is not kept).
func encodeRevision(r revision) []byte {
	prev, own := r.prev, r.own
	if prev != nil && r.prevWhole {
		prev = compressState(prev)
	}
	if own != nil {
		own = compressState(own)
	}
	return appendRevision(revFormat, r, nil, prev, own)
}

// encodeRevisionV3 writes r as a format 3 revision (the tests' stores of
// an older binary).
func encodeRevisionV3(r revision) []byte {
	return appendRevision(revFormatV3, r, r.fwd, r.prev, r.own)
}

func appendRevision(format byte, r revision, fwd, prev, own []byte) []byte {
	b := make([]byte, 0, 24+len(r.rv)+len(r.manager)+len(r.op)+len(r.sub)+7*binary.MaxVarintLen64+len(fwd)+len(prev)+len(own))
	b = append(b, format, byte(r.typ))
	b = binary.BigEndian.AppendUint64(b, uint64(r.time))
	for _, s := range []string{r.rv, r.manager, r.op, r.sub} {
		b = appendString(b, s)
	}
	var flags byte
	if fwd != nil {
		flags |= revHasFwd
	}
	if prev != nil {
		flags |= revHasPrev
		if r.prevWhole {
			flags |= revPrevWhole
		}
	}
	if own != nil {
		flags |= revHasOwn
	}
	b = append(b, flags)
	if fwd != nil {
		b = appendBytes(b, fwd)
	}
	if prev != nil {
		b = appendBytes(b, prev)
	}
	return append(b, own...)
}

// decodeRevision reads what encodeRevision (or encodeRevisionV3) wrote;
// a format 3 revision's byte fields point into v.
func decodeRevision(v []byte) (revision, error) { return decodeRevisionOf(v, true) }

// decodeRevisionOf is decodeRevision, reading the revision's resource
// version, manager, operation and subresource only when meta is set: a
// rebuild reads none of them, and they were three or four strings made
// per revision read.
func decodeRevisionOf(v []byte, meta bool) (revision, error) {
	if len(v) > 0 && (v[0] == 1 || v[0] == 2) {
		return revision{}, errOldRevision
	}
	if len(v) < 11 || (v[0] != revFormat && v[0] != revFormatV3) {
		return revision{}, errCorrupt
	}
	r := revision{typ: query.ChangeType(v[1]), time: int64(binary.BigEndian.Uint64(v[2:10]))}
	rest := v[10:]
	for _, dst := range []*string{&r.rv, &r.manager, &r.op, &r.sub} {
		var err error
		if !meta {
			if _, rest, err = cutBytes(rest); err != nil {
				return revision{}, err
			}
			continue
		}
		if *dst, rest, err = cutString(rest); err != nil {
			return revision{}, err
		}
	}
	if len(rest) < 1 {
		return revision{}, errCorrupt
	}
	flags := rest[0]
	rest = rest[1:]
	var err error
	if flags&revHasFwd != 0 {
		if r.fwd, rest, err = cutBytes(rest); err != nil {
			return revision{}, err
		}
	}
	if flags&revHasPrev != 0 {
		if r.prev, rest, err = cutBytes(rest); err != nil {
			return revision{}, err
		}
		r.prevWhole = flags&revPrevWhole != 0
	}
	if flags&revHasOwn != 0 {
		r.own = rest
	}
	if v[0] == revFormat {
		if r.prev != nil && r.prevWhole {
			if r.prev, err = decompressState(r.prev); err != nil {
				return revision{}, err
			}
		}
		if r.own != nil {
			if r.own, err = decompressState(r.own); err != nil {
				return revision{}, err
			}
		}
	}
	return r, nil
}
