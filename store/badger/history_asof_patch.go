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
	out, _, err := applyReverseAt(make([]byte, 0, len(doc)+len(patch)), doc, 0, patch, 0, true)
	return out, err
}

// applyReverseAt appends the object at doc[di] patched by the object at
// patch[pi] and returns the offset past the object in doc; top says doc's
// top level, whose tail may be copied (compactTail).
func applyReverseAt(dst, doc []byte, di int, patch []byte, pi int, top bool) ([]byte, int, error) {
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
	member := func(key []byte) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(append(append(dst, '"'), key...), '"', ':')
	}
	left := len(pm) // the patch's members not met yet
	var rest []byte // doc's tail copied as it is (compactTail)
	end, err := rawjson.EachMember(doc, di, func(d rawjson.Member) (int, error) {
		j := find(pm, d.Key, used)
		if j >= 0 {
			used[j] = true
			left--
			pv := patch[pm[j].ValueStart:pm[j].ValueEnd]
			var ve int
			var err error
			switch {
			case string(pv) == "null":
				ve, err = rawjson.SkipValue(doc, d.ValueStart)
			case pv[0] == '{' && doc[d.ValueStart] == '{':
				member(d.Key)
				dst, ve, err = applyReverseAt(dst, doc, d.ValueStart, patch, pm[j].ValueStart, false)
			default:
				if ve, err = rawjson.SkipValue(doc, d.ValueStart); err == nil {
					member(d.Key)
					dst = append(dst, pv...)
				}
			}
			if err == nil && top && left == 0 {
				if t, ok := compactTail(doc, ve); ok {
					rest = t
					return ve, errTailCopied
				}
			}
			return ve, err
		}
		ve, err := rawjson.SkipValue(doc, d.ValueStart)
		if err == nil {
			member(d.Key)
			dst = append(dst, doc[d.ValueStart:ve]...)
		}
		return ve, err
	})
	if rest != nil {
		// Every member of the patch was met: none is added, and doc's
		// members after the last one met are rest, each after a comma.
		if n == 0 && len(rest) > 0 {
			rest = rest[1:]
		}
		return append(append(dst, rest...), '}'), len(doc), nil
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
	return append(dst, '}'), end, nil
}

// compactTail is doc[i:] up to the closing brace of doc's top-level
// object, when i is just past a member's value of that level, doc is
// valid JSON and nothing there is white space, or ok false: what a walk
// of the members there appends (each "key":value as doc has it, after a
// comma), without walking them. Any byte up to a space refuses it, also
// inside a string (a walk keeps those), which a word at a time tells
// faster than a walk could skip them.
func compactTail(doc []byte, i int) (rest []byte, ok bool) {
	end := len(doc)
	for end > i && isJSONSpace(doc[end-1]) {
		end--
	}
	if end <= i || doc[end-1] != '}' {
		return nil, false
	}
	rest = doc[i : end-1]
	if len(rest) > 0 && rest[0] != ',' || hasSpaceOrControl(rest) {
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
