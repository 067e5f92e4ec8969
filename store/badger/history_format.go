package badger

import (
	"encoding/binary"
	"encoding/hex"
	"errors"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/s2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// The history's compact forms (2026-12-07, issue #48's bytes per change;
// measured: docs/benchmarks/history.md). What an older binary wrote is
// read as it is: retention removes it with the window, nothing rewrites
// it. Those forms are:
//   - r/ keys with the uid as text (36 bytes for a UUID; now the format
//     byte uidPacked and its 16 bytes, text only for a uid that is not a
//     canonical UUID);
//   - revision format 3, which also stored the forward patch (now made at
//     read time from the reverse one: forwardFromReverse) and its whole
//     states uncompressed (format 4 compresses them with s2);
//   - f/ values of uid and time (now the time only: the uid is in the
//     change's t/ value, read when a watch is replayed);
//   - t/ values of format 1, the uid as text (format 2 packs it), and
//     x/ entries repeating the t/ value (now key only).

// uidPacked leads a uid stored as its 16 bytes. No uid the API server
// makes starts with it (they are text), so a text uid never reads as one.
const uidPacked = 2

// packUID is the uid's packed form, nil when it is not a canonical UUID
// (lower-case hex, 8-4-4-4-12), whose text the packed form would not give
// back exactly.
func packUID(uid string) []byte {
	if len(uid) != 36 || uid[8] != '-' || uid[13] != '-' || uid[18] != '-' || uid[23] != '-' {
		return nil
	}
	var b [17]byte
	b[0] = uidPacked
	j := 1
	for i := 0; i < 36; {
		if uid[i] == '-' {
			if i != 8 && i != 13 && i != 18 && i != 23 {
				return nil
			}
			i++
			continue
		}
		hi, ok1 := lowerHex(uid[i])
		lo, ok2 := lowerHex(uid[i+1])
		if !ok1 || !ok2 {
			return nil
		}
		b[j] = hi<<4 | lo
		j++
		i += 2
	}
	return b[:]
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// unpackUID is the text of a packed uid (17 bytes, uidPacked first).
func unpackUID(b []byte) string {
	var t [36]byte
	hex.Encode(t[0:8], b[1:5])
	t[8] = '-'
	hex.Encode(t[9:13], b[5:7])
	t[13] = '-'
	hex.Encode(t[14:18], b[7:9])
	t[18] = '-'
	hex.Encode(t[19:23], b[9:11])
	t[23] = '-'
	hex.Encode(t[24:36], b[11:17])
	return string(t[:])
}

// uidForm is how a uid is stored in r/ keys: packed, or its text.
func uidForm(uid string) []byte {
	if p := packUID(uid); p != nil {
		return p
	}
	return []byte(uid)
}

// appendUID writes a uid into a t/ value (format 2): packed, or a zero
// byte and its text.
func appendUID(b []byte, uid string) []byte {
	if p := packUID(uid); p != nil {
		return append(b, p...)
	}
	return appendString(append(b, 0), uid)
}

// skipUID is cutUID without the uid's text: what follows it.
func skipUID(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errCorrupt
	}
	switch b[0] {
	case uidPacked:
		if len(b) < 17 {
			return nil, errCorrupt
		}
		return b[17:], nil
	case 0:
		_, rest, err := cutBytes(b[1:])
		return rest, err
	}
	return nil, errCorrupt
}

func cutUID(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errCorrupt
	}
	switch b[0] {
	case uidPacked:
		if len(b) < 17 {
			return "", nil, errCorrupt
		}
		return unpackUID(b[:17]), b[17:], nil
	case 0:
		return cutString(b[1:])
	}
	return "", nil, errCorrupt
}

// packedRevsKey ("b/r" -> ""): every r/ key of the store has the uid in
// its current form (uidForm). Set when the store begins its history, so
// a store that kept history before the packed form (no key) is also read
// under the text form.
var packedRevsKey = []byte{'b', sep, 'r'}

// textRevPrefix is the r/ prefix of a uid's revisions written with the
// uid as text, nil when that is the only form (the uid does not pack) or
// the store holds no such revisions.
func textRevPrefix(txn *bdg.Txn, cluster string, g schema.GroupVersionResource, uid string) ([]byte, error) {
	if packUID(uid) == nil {
		return nil, nil
	}
	if _, err := txn.Get(packedRevsKey); err == nil {
		return nil, nil
	} else if !errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, err
	}
	return textRevPrefixOf(cluster, g, uid), nil
}

// scanRevisions calls fn with the uid's revisions from seq from on, in
// stream order, until it returns false: those under the text form first
// (an older binary wrote them, before any packed one), then the packed.
func scanRevisions(txn *bdg.Txn, cluster string, g schema.GroupVersionResource, uid string, from uint64, values bool, fn func(seq uint64, item *bdg.Item) (bool, error)) error {
	text, err := textRevPrefix(txn, cluster, g, uid)
	if err != nil {
		return err
	}
	for _, prefix := range [][]byte{text, revPrefix(cluster, g, uid)} {
		if prefix == nil {
			continue
		}
		more, err := scanRevPrefix(txn, prefix, from, values, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func scanRevPrefix(txn *bdg.Txn, prefix []byte, from uint64, values bool, fn func(seq uint64, item *bdg.Item) (bool, error)) (bool, error) {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: values})
	defer it.Close()
	for it.Seek(binary.BigEndian.AppendUint64(prefix[:len(prefix):len(prefix)], from)); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+8 {
			return false, errCorrupt
		}
		more, err := fn(binary.BigEndian.Uint64(k[len(prefix):]), it.Item())
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}

// compressState and decompressState: a revision's whole states (format
// 4) are s2 blocks, a Pod's JSON about a third of its bytes.
func compressState(b []byte) []byte { return s2.Encode(nil, b) }

func decompressState(b []byte) ([]byte, error) {
	out, err := s2.Decode(nil, b)
	if err != nil {
		return nil, errCorrupt
	}
	return out, nil
}

// forwardFromReverse is the forward merge patch of a change (the change a
// revision shows) from the state after it (cur) and its reverse patch
// (rev, cur back to the state before it), as diffLevel made the two in
// one scan: the same members in the same order, each value cur's own
// bytes (null for a member the change removed), entering the objects the
// reverse patch enters. So format 4 stores one patch, not two.
func forwardFromReverse(cur, rev []byte) ([]byte, error) {
	return forwardLevel(make([]byte, 0, len(rev)+64), cur, 0, rev, 0)
}

func forwardLevel(dst, cur []byte, ci int, rev []byte, ri int) ([]byte, error) {
	var cbuf, rbuf [32]rawjson.Member
	cm, _, err := rawjson.Members(cur, ci, cbuf[:0])
	if err != nil {
		return nil, err
	}
	rm, _, err := rawjson.Members(rev, ri, rbuf[:0])
	if err != nil {
		return nil, err
	}
	var ubuf [32]bool
	used := ubuf[:0]
	if len(cm) <= len(ubuf) {
		used = ubuf[:len(cm)]
	} else {
		used = make([]bool, len(cm))
	}
	dst = append(dst, '{')
	for i, r := range rm {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(append(append(dst, '"'), r.Key...), '"', ':')
		j := find(cm, r.Key, used)
		if j < 0 {
			dst = append(dst, "null"...)
			continue
		}
		used[j] = true
		rv, cv := rev[r.ValueStart:r.ValueEnd], cur[cm[j].ValueStart:cm[j].ValueEnd]
		if rv[0] == '{' && cv[0] == '{' {
			if dst, err = forwardLevel(dst, cur, cm[j].ValueStart, rev, r.ValueStart); err != nil {
				return nil, err
			}
			continue
		}
		dst = append(dst, cv...)
	}
	return append(dst, '}'), nil
}

// forwardPatch is the change revision r shows given its state: stored
// (format 3), made from its reverse patch, or from the whole previous
// state it holds; nil for a delete and when r keeps no previous state
// (the reader makes one from the previous revision's state, or shows
// none).
func forwardPatch(r revision, state []byte) []byte {
	switch {
	case r.typ == query.ChangeDeleted || state == nil:
		return nil
	case r.fwd != nil:
		return r.fwd
	case r.prev == nil:
		return nil
	case r.prevWhole:
		p, err := rawMergePatch(r.prev, state)
		if err != nil {
			return nil
		}
		return p
	}
	p, err := forwardFromReverse(state, r.prev)
	if err != nil {
		return nil
	}
	return p
}
