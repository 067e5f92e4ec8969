package badger

import (
	"encoding/binary"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// applyReverse is rawApplyMergePatch (mergepatch.go) in one pass over
// doc: a member the patch changes inside is patched while doc is read,
// where rawApplyMergePatch first skips it to find the member's end and
// then reads it again to patch it. Rebuilding a state is mostly this
// walk (an as-of list that rebuilds every object spent about half its
// time applying patches: docs/benchmarks/history.md), and a Pod's
// patches go into its metadata and status, a third of its bytes read
// twice. Once every member of the patch's top level is met, the rest of
// doc's top level is copied as it is, not walked, when it holds no byte
// a walk would drop (white space; compactTail): a Pod's relabel or a
// metadata-only change patches its metadata, and its spec and status,
// most of its bytes, are not read. Same result, byte for byte, for any
// doc and patch (TestApplyReverse), but for a doc that is not valid
// JSON, which it may take where rawApplyMergePatch fails: a rebuild's
// states are the store's own JSON, checked when stored.
func applyReverse(doc, patch []byte) ([]byte, error) {
	return applyReverseIn(doc, patch, rawjson.Span{})
}

// applyReverseIn is applyReverse given where doc's top-level metadata
// value lies (md; zero: not known), as the record's row spans say
// (rawjson.FindRowSpans, found when it was stored): a member not patched
// there is passed over without a walk, and once the patch's members in
// it are met, the metadata's rest is copied as the top level's tail is.
// A Pod's relabel so no longer walks its managedFields, most of its
// metadata's bytes, nor a status change its metadata. The same result as
// applyReverse, byte for byte (TestApplyReverse), when md is doc's.
func applyReverseIn(doc, patch []byte, md rawjson.Span) ([]byte, error) {
	return applyReverseTo(make([]byte, 0, len(doc)+len(patch)), doc, patch, md)
}

// applyReverseTo is applyReverseIn appending the result to dst (an as-of
// list's arena: a rebuilt object is not an allocation of its own).
func applyReverseTo(dst, doc, patch []byte, md rawjson.Span) ([]byte, error) {
	w := reverseWalk{doc: doc, known: md, cleanFrom: -1}
	if md.Start <= 0 || md.End > len(doc) || md.End-md.Start < 2 || doc[md.Start] != '{' || doc[md.End-1] != '}' {
		w.known = rawjson.Span{}
	}
	out, _, err := w.at(dst, 0, patch, 0, true, 0)
	return out, err
}

// reverseWalk is one applyReverseIn's document and what it knows of it:
// the span of one top-level value (known; zero: none) and an offset
// after which no byte up to a space occurs (cleanFrom, found by the
// first level whose rest it copies; -1: not looked for, -2: looked for
// and found one), so that the levels above do not look again.
type reverseWalk struct {
	doc       []byte
	known     rawjson.Span
	cleanFrom int
}

// clean reports whether doc[i:] holds no byte up to a space (trailing
// white space after the top level's brace aside), looked for once.
func (w *reverseWalk) clean(i int) bool {
	if w.cleanFrom == -1 {
		end := len(w.doc)
		for end > i && isJSONSpace(w.doc[end-1]) {
			end--
		}
		if w.cleanFrom = -2; !hasSpaceOrControl(w.doc[i:end]) {
			w.cleanFrom = i
		}
	}
	return w.cleanFrom >= 0 && i >= w.cleanFrom
}

// skip is the offset past the value at doc[i]: the known span's end
// there, else a walk's.
func (w *reverseWalk) skip(i int, top bool) (int, error) {
	if top && w.known.End > 0 && i == w.known.Start {
		return w.known.End, nil
	}
	return rawjson.SkipValue(w.doc, i)
}

// at appends the object at doc[di] patched by the object at patch[pi]
// and returns the offset past the object in doc; top says doc's top
// level, end (0: not known) the offset past this object's closing brace
// when it is not the top level. A level whose end is known copies its
// tail as it is (compactTail).
func (w *reverseWalk) at(dst []byte, di int, patch []byte, pi int, top bool, end int) ([]byte, int, error) {
	doc := w.doc
	var pbuf [32]rawjson.Member
	pm, _, err := rawjson.Members(patch, pi, pbuf[:0])
	if err != nil {
		return nil, 0, err
	}
	var ubuf [32]bool
	used := ubuf[:0]
	if len(pm) > len(ubuf) {
		used = make([]bool, len(pm))
	} else {
		used = ubuf[:len(pm)]
	}
	dst = append(dst, '{')
	n := 0
	member := func(key []byte) { dst = appendMemberKey(dst, &n, key) }
	left := len(pm) // the patch's members not met yet
	var rest []byte // doc's tail copied as it is (compactTail)
	restEnd := 0    // the offset past this level's brace, with rest
	oend, err := rawjson.EachMember(doc, di, func(d rawjson.Member) (int, error) {
		j := find(pm, d.Key, used)
		if j >= 0 {
			used[j] = true
			left--
			pv := patch[pm[j].ValueStart:pm[j].ValueEnd]
			var ve int
			var err error
			switch {
			case string(pv) == "null":
				ve, err = w.skip(d.ValueStart, top)
			case pv[0] == '{' && doc[d.ValueStart] == '{':
				member(d.Key)
				inner := 0
				if top && w.known.End > 0 && d.ValueStart == w.known.Start {
					inner = w.known.End
				}
				dst, ve, err = w.at(dst, d.ValueStart, patch, pm[j].ValueStart, false, inner)
			default:
				if ve, err = w.skip(d.ValueStart, top); err == nil {
					member(d.Key)
					dst = append(dst, pv...)
				}
			}
			if err == nil && left == 0 {
				if t, e, ok := w.tail(ve, top, end); ok {
					rest, restEnd = t, e
					return ve, errTailCopied
				}
			}
			return ve, err
		}
		ve, err := w.skip(d.ValueStart, top)
		if err == nil {
			member(d.Key)
			dst = append(dst, doc[d.ValueStart:ve]...)
		}
		return ve, err
	})
	if rest != nil {
		// Every member of the patch was met: none is added.
		return closeWithRest(dst, rest, n), restEnd, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for j, p := range pm {
		if pv := patch[p.ValueStart:p.ValueEnd]; !used[j] && string(pv) != "null" {
			member(p.Key)
			dst = append(dst, pv...)
		}
	}
	return append(dst, '}'), oend, nil
}

// tail is the rest of a level after its member ending at i, copied as
// it is, and the offset past the level's brace: the top level's
// (compactTail), or a nested one's whose end is known, when no byte a
// walk would drop lies there. ok is false when neither holds.
func (w *reverseWalk) tail(i int, top bool, end int) (rest []byte, restEnd int, ok bool) {
	doc := w.doc
	if top {
		if w.cleanFrom >= 0 && i >= w.cleanFrom {
			// Looked at already by a level below: only the shape is left.
			if rest, ok = tailShape(doc, i); !ok {
				return nil, 0, false
			}
			return rest, len(doc), true
		}
		if rest, ok = compactTail(doc, i); !ok {
			return nil, 0, false
		}
		return rest, len(doc), true
	}
	if end <= i || doc[end-1] != '}' {
		return nil, 0, false
	}
	rest = doc[i : end-1 : end-1]
	if len(rest) > 0 && rest[0] != ',' || !w.clean(i) {
		return nil, 0, false
	}
	return rest, end, true
}

// compactTail is doc[i:] up to the closing brace of doc's top-level
// object, when i is just past a member's value of that level, doc is
// valid JSON and nothing there is white space, or ok false: what a walk
// of the members there appends (each "key":value as doc has it, after a
// comma), without walking them. Any byte up to a space refuses it, also
// inside a string (a walk keeps those), which a word at a time tells
// faster than a walk could skip them.
func compactTail(doc []byte, i int) (rest []byte, ok bool) {
	if rest, ok = tailShape(doc, i); !ok || hasSpaceOrControl(rest) {
		return nil, false
	}
	return rest, true
}

// tailShape is compactTail without the look for white space: doc[i:] up
// to the closing brace of the top level, trailing white space after it
// aside, when it is empty or starts with a comma.
func tailShape(doc []byte, i int) (rest []byte, ok bool) {
	end := len(doc)
	for end > i && isJSONSpace(doc[end-1]) {
		end--
	}
	if end <= i || doc[end-1] != '}' {
		return nil, false
	}
	rest = doc[i : end-1]
	if len(rest) > 0 && rest[0] != ',' {
		return nil, false
	}
	// Not nil when empty: the caller tells a tail from none by nil.
	return doc[i : end-1 : end-1], true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// hasSpaceOrControl reports whether b holds a byte up to 0x20, eight
// bytes at a time (a byte below 0x21 borrows into its top bit, which the
// byte's own top bit, clear for ASCII, does not mask).
func hasSpaceOrControl(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	// Four words a step: one branch for 32 bytes (a Pod's tail is 2 KB).
	for ; i+32 <= len(b); i += 32 {
		w0, w1 := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
		w2, w3 := binary.LittleEndian.Uint64(b[i+16:]), binary.LittleEndian.Uint64(b[i+24:])
		if ((w0-ones*0x21)&^w0|(w1-ones*0x21)&^w1|(w2-ones*0x21)&^w2|(w3-ones*0x21)&^w3)&highs != 0 {
			return true
		}
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if (w-ones*0x21)&^w&highs != 0 {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] <= ' ' {
			return true
		}
	}
	return false
}
