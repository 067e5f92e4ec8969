package badger

import (
	"encoding/binary"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// The values the history's feed keys (t/, x/) and the uid index's head
// hold, and their encodings; history.go writes them, history_read.go and
// history_retain.go read them.

// changeEntry is a change as the feed keys (t/, x/) hold it.
type changeEntry struct {
	typ               query.ChangeType
	gvr               schema.GroupVersionResource
	uid, ns, name, rv string
	manager, op, sub  string
	labels            map[string]string
	// labelRef, when set, is the hash of the labels' encoding, interned
	// in a J/ entry of the change's epoch (history_labels.go): decoded
	// labels are nil until resolveLabels reads it.
	labelRef []byte
	// format is the t/ value's format as read: 1 (an older binary's: the
	// uid as text, its f/ value the uid and time, its x/ value a copy of
	// the t/ one) or 2 (the uid packed, f/ the time only, x/ key only).
	format byte
}

const (
	changeFormatV1 = 1
	changeFormat   = 2
)

// encodeChange writes a format 2 t/ value; the labels inline, or (c.labelRef
// set) the hash of their J/ entry.
func encodeChange(c changeEntry) []byte {
	return appendChange(c, changeBody(nil, c))
}

// changeBody appends the part of a format 2 t/ value between the change's
// type and its labels: the resource, uid (packed), name, resourceVersion
// and manager, all the event's own, so the batch's parallel pre-stage
// makes it (history_pre.go) and the serial apply only copies it.
func changeBody(b []byte, c changeEntry) []byte {
	for _, s := range []string{c.gvr.Group, c.gvr.Version, c.gvr.Resource} {
		b = appendString(b, s)
	}
	b = appendUID(b, c.uid)
	for _, s := range []string{c.ns, c.name, c.rv, c.manager, c.op, c.sub} {
		b = appendString(b, s)
	}
	return b
}

// appendChange is the t/ value of c whose body (changeBody) is made.
func appendChange(c changeEntry, body []byte) []byte {
	n := 3 + len(body) + labelRefLen
	if c.labelRef == nil {
		n = 3 + len(body) + labelsLen(c.labels)
	}
	b := make([]byte, 0, n)
	b = append(append(b, changeFormat, byte(c.typ)), body...)
	if c.labelRef != nil {
		return append(append(b, labelsInterned), c.labelRef...)
	}
	return appendLabels(append(b, labelsInline), c.labels)
}

// encodeChangeV1 writes a format 1 t/ value (the tests' stores of an
// older binary).
func encodeChangeV1(c changeEntry) []byte {
	b := make([]byte, 0, 64+len(c.uid)+len(c.ns)+len(c.name)+labelsLen(c.labels))
	b = append(b, changeFormatV1, byte(c.typ))
	for _, s := range []string{c.gvr.Group, c.gvr.Version, c.gvr.Resource, c.uid, c.ns, c.name, c.rv, c.manager, c.op, c.sub} {
		b = appendString(b, s)
	}
	return appendLabels(b, c.labels)
}

func decodeChange(v []byte, withLabels bool) (changeEntry, error) {
	var c changeEntry
	if len(v) < 2 || (v[0] != changeFormat && v[0] != changeFormatV1) {
		return c, errCorrupt
	}
	c.format, c.typ = v[0], query.ChangeType(v[1])
	rest := v[2:]
	var err error
	for _, dst := range []*string{&c.gvr.Group, &c.gvr.Version, &c.gvr.Resource} {
		if *dst, rest, err = cutString(rest); err != nil {
			return c, err
		}
	}
	if c.format == changeFormat {
		c.uid, rest, err = cutUID(rest)
	} else {
		c.uid, rest, err = cutString(rest)
	}
	if err != nil {
		return c, err
	}
	for _, dst := range []*string{&c.ns, &c.name, &c.rv, &c.manager, &c.op, &c.sub} {
		if *dst, rest, err = cutString(rest); err != nil {
			return c, err
		}
	}
	if c.format == changeFormat {
		if len(rest) == 0 {
			return c, errCorrupt
		}
		switch rest[0] {
		case labelsInterned:
			if len(rest) != 1+labelRefLen {
				return c, errCorrupt
			}
			c.labelRef = rest[1:]
			return c, nil
		case labelsInline:
			rest = rest[1:]
		default:
			return c, errCorrupt
		}
	}
	c.labels, _, err = cutLabels(rest, withLabels)
	return c, err
}

// histHead is what the uid index keeps of an object's newest revision, so
// an update learns whether and how to record itself from the entry it
// reads anyway.
type histHead struct {
	seq   uint64 // 0: the object has no revision
	time  int64
	chain uint8 // patches since the last snapshot
	rv    string
	// labelEpoch is 1 + the epoch in whose J/ entry the object's label
	// set, as its newest revision had it, is interned (0: none known), so
	// a change that keeps the labels names the entry without reading it
	// (history_labels.go).
	labelEpoch int64
}

func appendHead(b []byte, h histHead) []byte {
	if h.seq == 0 {
		return b
	}
	b = binary.BigEndian.AppendUint64(b, h.seq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.time))
	b = appendString(append(b, h.chain), h.rv)
	if h.labelEpoch != 0 {
		b = binary.AppendUvarint(b, uint64(h.labelEpoch))
	}
	return b
}

func cutHead(b []byte) (histHead, error) {
	if len(b) == 0 {
		return histHead{}, nil
	}
	if len(b) < 17 {
		return histHead{}, errCorrupt
	}
	h := histHead{seq: binary.BigEndian.Uint64(b), time: int64(binary.BigEndian.Uint64(b[8:])), chain: b[16]}
	rv, rest, err := cutString(b[17:])
	if err != nil {
		return histHead{}, errCorrupt
	}
	h.rv = rv
	if len(rest) > 0 { // an older binary's head ends with the rv
		e, n := binary.Uvarint(rest)
		if n <= 0 || n != len(rest) {
			return histHead{}, errCorrupt
		}
		h.labelEpoch = int64(e)
	}
	return h, nil
}
