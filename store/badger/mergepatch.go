package badger

import (
	"bytes"
	"errors"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// The history's merge patches (RFC 7386) are made here from the raw
// bytes, not by github.com/evanphx/json-patch's CreateMergePatch, which
// decodes both objects and writes the changed values back in key order:
// a changed array (a container status, a condition) came back with its
// objects' members re-ordered, the patch did not give back the object's
// exact bytes, and the revision had to be a full snapshot (measured:
// docs/benchmarks/history.md). Here a changed value is the new object's
// own bytes. A patch is applied the same way (rawApplyMergePatch): the
// members in the document's order, each unchanged value its own bytes,
// the added ones last. A change that a patch applied so would not give
// back exactly (a member added before others, an added object holding a
// null, which RFC 7386 would drop) is errNoPatch, and the revision is a
// snapshot.

var errNoPatch = errors.New("no merge patch expresses the change")

// rawMergePatch is the merge patch from old to cur, two JSON objects.
// errNoPatch when a merge patch cannot express the change (a member set
// to null, or either side not an object).
func rawMergePatch(old, cur []byte) ([]byte, error) {
	p, _, err := rawMergePatchExact(old, cur)
	return p, err
}

// rawMergePatchExact is rawMergePatch, and whether applying the patch to
// old (rawApplyMergePatch) is known to give back cur's exact bytes without
// applying it: every object level the patch enters is written compact in
// cur (as the collector writes objects: no white space between members),
// has no duplicate keys in old or cur, and keeps old's members in their
// order. Applying then writes each level as cur has it: the kept members
// in their order, each unchanged value its own bytes, the added ones last
// (diffObject refuses others). When it says false the patch may still be
// exact; only applying it tells (mergePatch does). Saves the write path
// one apply and compare per update (docs/benchmarks/history.md).
func rawMergePatchExact(old, cur []byte) ([]byte, bool, error) {
	exact := len(cur) > 0 && cur[0] == '{'
	p, _, err := diffObject(make([]byte, 0, 128), old, 0, cur, 0, &exact)
	return p, exact, err
}

// diffObject appends the patch from the object at old[oi] to the one at
// cur[ci] and reports whether it changes anything. It clears *exact when
// this level breaks a condition of rawMergePatchExact.
func diffObject(dst, old []byte, oi int, cur []byte, ci int, exact *bool) ([]byte, bool, error) {
	var obuf, cbuf [32]rawjson.Member
	om, _, err := rawjson.Members(old, oi, obuf[:0])
	if err != nil {
		return nil, false, errNoPatch
	}
	cm, cend, err := rawjson.Members(cur, ci, cbuf[:0])
	if err != nil {
		return nil, false, errNoPatch
	}
	if *exact && (!compactLevel(cur, ci, cm, cend) || (ci == 0 && cend != len(cur)) || hasDuplicate(om) || hasDuplicate(cm)) {
		*exact = false
	}
	lastJ := -1
	start := len(dst)
	dst = append(dst, '{')
	n := 0
	member := func(key []byte) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(append(append(dst, '"'), key...), '"', ':')
	}
	used := make([]bool, len(om))
	added := false
	for _, c := range cm {
		cv := cur[c.ValueStart:c.ValueEnd]
		j := find(om, c.Key, used)
		if j < 0 {
			if string(cv) == "null" || (cv[0] == '{' && bytes.Contains(cv, []byte("null"))) {
				return nil, false, errNoPatch
			}
			added = true
			member(c.Key)
			dst = append(dst, cv...)
			continue
		}
		if added {
			return nil, false, errNoPatch // an added member before a kept one: applied, it would come last
		}
		used[j] = true
		if j < lastJ {
			*exact = false // a kept member moved: applying keeps old's order
		}
		lastJ = j
		ov := old[om[j].ValueStart:om[j].ValueEnd]
		if bytes.Equal(ov, cv) {
			continue
		}
		if ov[0] == '{' && cv[0] == '{' {
			mark, markN := len(dst), n
			member(c.Key)
			var changed bool
			if dst, changed, err = diffObject(dst, old, om[j].ValueStart, cur, c.ValueStart, exact); err != nil {
				return nil, false, err
			}
			if !changed {
				// Other bytes, the same members: applying keeps old's.
				*exact = false
				dst, n = dst[:mark], markN
			}
			continue
		}
		if string(cv) == "null" || (cv[0] == '{' && bytes.Contains(cv, []byte("null"))) {
			return nil, false, errNoPatch
		}
		member(c.Key)
		dst = append(dst, cv...)
	}
	for j, o := range om {
		if !used[j] {
			member(o.Key)
			dst = append(dst, "null"...)
		}
	}
	if n == 0 {
		return append(dst[:start], '{', '}'), false, nil
	}
	return append(dst, '}'), true, nil
}

// compactLevel reports whether the object at b[i], of members ms, ending
// at end, is written as applyObject writes one: no white space around its
// braces, colons and commas (its values are compared as bytes apart).
func compactLevel(b []byte, i int, ms []rawjson.Member, end int) bool {
	if i >= len(b) || b[i] != '{' {
		return false
	}
	next := i + 1
	for _, m := range ms {
		if m.Start != next || m.ValueStart != m.Start+len(m.Key)+3 {
			return false
		}
		next = m.ValueEnd + 1
	}
	if len(ms) == 0 {
		next = i + 2
	}
	return end == next && b[end-1] == '}'
}

// hasDuplicate reports whether two members have the same key (raw bytes).
func hasDuplicate(ms []rawjson.Member) bool {
	for i := 1; i < len(ms); i++ {
		for j := range i {
			if bytes.Equal(ms[i].Key, ms[j].Key) {
				return true
			}
		}
	}
	return false
}

// find is the index of the unused member named key, or -1.
func find(ms []rawjson.Member, key []byte, used []bool) int {
	for j, m := range ms {
		if !used[j] && bytes.Equal(m.Key, key) {
			return j
		}
	}
	return -1
}

// rawApplyMergePatch applies a merge patch made by rawMergePatch to doc.
func rawApplyMergePatch(doc, patch []byte) ([]byte, error) {
	return applyObject(make([]byte, 0, len(doc)+len(patch)), doc, 0, patch, 0)
}

// applyObject appends the object at doc[di] patched by the object at
// patch[pi].
func applyObject(dst, doc []byte, di int, patch []byte, pi int) ([]byte, error) {
	var dbuf, pbuf [32]rawjson.Member
	dm, _, err := rawjson.Members(doc, di, dbuf[:0])
	if err != nil {
		return nil, err
	}
	pm, _, err := rawjson.Members(patch, pi, pbuf[:0])
	if err != nil {
		return nil, err
	}
	used := make([]bool, len(pm))
	dst = append(dst, '{')
	n := 0
	member := func(key []byte) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(append(append(dst, '"'), key...), '"', ':')
	}
	for _, d := range dm {
		dv := doc[d.ValueStart:d.ValueEnd]
		j := find(pm, d.Key, used)
		if j < 0 {
			member(d.Key)
			dst = append(dst, dv...)
			continue
		}
		used[j] = true
		pv := patch[pm[j].ValueStart:pm[j].ValueEnd]
		switch {
		case string(pv) == "null":
		case pv[0] == '{' && dv[0] == '{':
			member(d.Key)
			if dst, err = applyObject(dst, doc, d.ValueStart, patch, pm[j].ValueStart); err != nil {
				return nil, err
			}
		default:
			member(d.Key)
			dst = append(dst, pv...)
		}
	}
	for j, p := range pm {
		if pv := patch[p.ValueStart:p.ValueEnd]; !used[j] && string(pv) != "null" {
			member(p.Key)
			dst = append(dst, pv...)
		}
	}
	return append(dst, '}'), nil
}
