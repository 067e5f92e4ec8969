package badger

import (
	"github.com/fleetview/fleetview/internal/rawjson"
)

// applyReverse is rawApplyMergePatch (mergepatch.go) in one pass over
// doc: a member the patch changes inside is patched while doc is read,
// where rawApplyMergePatch first skips it to find the member's end and
// then reads it again to patch it. Rebuilding a state is mostly this
// walk (an as-of list that rebuilds every object spent about half its
// time applying patches: docs/benchmarks/history.md), and a Pod's
// patches go into its metadata and status, a third of its bytes read
// twice. Same result, byte for byte, for any doc and patch
// (TestApplyReverse).
func applyReverse(doc, patch []byte) ([]byte, error) {
	out, _, err := applyReverseAt(make([]byte, 0, len(doc)+len(patch)), doc, 0, patch, 0)
	return out, err
}

// applyReverseAt appends the object at doc[di] patched by the object at
// patch[pi] and returns the offset past the object in doc.
func applyReverseAt(dst, doc []byte, di int, patch []byte, pi int) ([]byte, int, error) {
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
	end, err := rawjson.EachMember(doc, di, func(d rawjson.Member) (int, error) {
		j := find(pm, d.Key, used)
		if j >= 0 {
			used[j] = true
			pv := patch[pm[j].ValueStart:pm[j].ValueEnd]
			switch {
			case string(pv) == "null":
				return rawjson.SkipValue(doc, d.ValueStart)
			case pv[0] == '{' && doc[d.ValueStart] == '{':
				member(d.Key)
				var ve int
				var err error
				dst, ve, err = applyReverseAt(dst, doc, d.ValueStart, patch, pm[j].ValueStart)
				return ve, err
			default:
				ve, err := rawjson.SkipValue(doc, d.ValueStart)
				if err == nil {
					member(d.Key)
					dst = append(dst, pv...)
				}
				return ve, err
			}
		}
		ve, err := rawjson.SkipValue(doc, d.ValueStart)
		if err == nil {
			member(d.Key)
			dst = append(dst, doc[d.ValueStart:ve]...)
		}
		return ve, err
	})
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
