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
// back exactly (an added object holding a null, which RFC 7386 would
// drop) is errNoPatch, and the revision is a snapshot. A member added
// before others has no exact forward patch but an exact reverse one (it
// removes the member in place), which is what a revision keeps.

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
// (diffLevel refuses others). When it says false the patch may still be
// exact; only applying it tells (mergePatches does). Saves the write path
// one apply and compare per update (docs/benchmarks/history.md).
func rawMergePatchExact(old, cur []byte) ([]byte, bool, error) {
	pp := newPatchPair(old, cur)
	if _, err := diffLevel(&pp, old, 0, cur, 0, true); err != nil {
		return nil, false, err
	}
	if pp.forder {
		return nil, false, errNoPatch
	}
	return pp.f, pp.fx, nil
}

// patchPair is what one scan of two objects makes: the forward patch (old
// to cur: the change a revision shows) and the reverse one (cur back to
// old: what the history keeps to rebuild the previous state from the
// newer one). fx and rx say whether each is known exact without applying
// it (rawMergePatchExact's conditions, for cur and old); rbad that no
// reverse patch expresses the change (a member removed before a kept one,
// or an old value holding a null); forder that the forward patch, applied,
// would not give back cur (a member added before a kept one comes last),
// while the reverse one still can: it removes the added member in place.
type patchPair struct {
	f, r       []byte
	fx, rx     bool
	rbad       bool
	forder     bool
	fn, rn     int // members written at the current level
	fbuf, rbuf [128]byte
}

func newPatchPair(old, cur []byte) patchPair {
	return patchPair{fx: len(cur) > 0 && cur[0] == '{', rx: len(old) > 0 && old[0] == '{'}
}

// hasNull: a value a merge patch cannot carry as is (null deletes; an
// object holding a null would lose it when applied by RFC 7386).
func hasNull(v []byte) bool {
	return string(v) == "null" || (v[0] == '{' && bytes.Contains(v, []byte("null")))
}

// mergePatches are the forward and reverse merge patches between old and
// cur, each nil when it is not much smaller than its target or does not
// give back the target's exact bytes. One scan makes both. A member added
// before kept ones (a label whose key sorts before the others': the API
// server writes maps sorted) has a reverse patch and no forward one; the
// revision keeps the reverse patch and shows a forward one made when read.
func mergePatches(old, cur []byte) (fwd, rev []byte) {
	pp := newPatchPair(old, cur)
	pp.f, pp.r = pp.fbuf[:0], pp.rbuf[:0]
	if _, err := diffLevel(&pp, old, 0, cur, 0, true); err != nil {
		return nil, nil
	}
	if 2*len(pp.f) <= len(cur) && !pp.forder {
		if pp.fx {
			fwd = pp.f
		} else if back, err := rawApplyMergePatch(old, pp.f); err == nil && bytes.Equal(back, cur) {
			fwd = pp.f
		}
	}
	if !pp.rbad && 2*len(pp.r) <= len(old) {
		if pp.rx {
			rev = pp.r
		} else if back, err := rawApplyMergePatch(cur, pp.r); err == nil && bytes.Equal(back, old) {
			rev = pp.r
		}
	}
	// The buffers are the pair's own, on the stack: copy out what is kept.
	return bytes.Clone(fwd), bytes.Clone(rev)
}

// diffLevel appends to pp the patches between the object at old[oi] and
// the one at cur[ci] and reports whether they differ. It clears pp.fx and
// pp.rx when this level breaks a condition of rawMergePatchExact (for cur
// and for old). errNoPatch when no forward merge patch expresses the
// change; pp.forder when only applying it would misplace an added member.
func diffLevel(pp *patchPair, old []byte, oi int, cur []byte, ci int, top bool) (bool, error) {
	var obuf, cbuf [32]rawjson.Member
	om, oend, err := rawjson.Members(old, oi, obuf[:0])
	if err != nil {
		return false, errNoPatch
	}
	cm, cend, err := rawjson.Members(cur, ci, cbuf[:0])
	if err != nil {
		return false, errNoPatch
	}
	if pp.fx || pp.rx {
		dup := hasDuplicate(om) || hasDuplicate(cm)
		if pp.fx && (dup || !compactLevel(cur, ci, cm, cend) || (top && cend != len(cur))) {
			pp.fx = false
		}
		if pp.rx && (dup || !compactLevel(old, oi, om, oend) || (top && oend != len(old))) {
			pp.rx = false
		}
	}
	fstart, rstart, fn0, rn0 := len(pp.f), len(pp.r), pp.fn, pp.rn
	pp.f, pp.r = append(pp.f, '{'), append(pp.r, '{')
	pp.fn, pp.rn = 0, 0
	var ubuf [32]bool
	used := ubuf[:0]
	if len(om) <= len(ubuf) {
		used = ubuf[:len(om)]
	} else {
		used = make([]bool, len(om))
	}
	lastJ := -1
	added := false
	for _, c := range cm {
		cv := cur[c.ValueStart:c.ValueEnd]
		j := find(om, c.Key, used)
		if j < 0 {
			if hasNull(cv) {
				return false, errNoPatch
			}
			added = true
			pp.fmember(c.Key, cv)
			pp.rmember(c.Key, []byte("null"))
			continue
		}
		if added {
			// An added member before a kept one: the forward patch,
			// applied, would put it last; the reverse one removes it.
			pp.forder, pp.fx = true, false
		}
		used[j] = true
		if j < lastJ {
			pp.fx, pp.rx = false, false // a kept member moved: applying keeps the target's order
		}
		lastJ = j
		ov := old[om[j].ValueStart:om[j].ValueEnd]
		if bytes.Equal(ov, cv) {
			continue
		}
		if ov[0] == '{' && cv[0] == '{' {
			fmark, rmark, fn, rn := len(pp.f), len(pp.r), pp.fn, pp.rn
			pp.fmember(c.Key, nil)
			pp.rmember(c.Key, nil)
			changed, err := diffLevel(pp, old, om[j].ValueStart, cur, c.ValueStart, false)
			if err != nil {
				return false, err
			}
			if !changed {
				// Other bytes, the same members: applying keeps the target's.
				pp.fx, pp.rx = false, false
				pp.f, pp.r, pp.fn, pp.rn = pp.f[:fmark], pp.r[:rmark], fn, rn
			}
			continue
		}
		if hasNull(cv) {
			return false, errNoPatch
		}
		pp.rbad = pp.rbad || hasNull(ov)
		pp.fmember(c.Key, cv)
		pp.rmember(c.Key, ov)
	}
	removed := false
	for j, o := range om {
		if used[j] {
			// A kept member after a removed one: the reverse patch,
			// applied, would put the removed one last.
			pp.rbad = pp.rbad || removed
			continue
		}
		ov := old[o.ValueStart:o.ValueEnd]
		pp.rbad = pp.rbad || hasNull(ov)
		removed = true
		pp.fmember(o.Key, []byte("null"))
		pp.rmember(o.Key, ov)
	}
	changed := pp.fn > 0
	if !changed {
		pp.f, pp.r = append(pp.f[:fstart], '{', '}'), append(pp.r[:rstart], '{', '}')
	} else {
		pp.f, pp.r = append(pp.f, '}'), append(pp.r, '}')
	}
	pp.fn, pp.rn = fn0, rn0
	return changed, nil
}

// fmember and rmember append a member to the forward and reverse patch;
// v nil writes the key alone (an object follows).
func (pp *patchPair) fmember(key, v []byte) {
	if pp.fn > 0 {
		pp.f = append(pp.f, ',')
	}
	pp.fn++
	pp.f = append(append(append(append(pp.f, '"'), key...), '"', ':'), v...)
}

func (pp *patchPair) rmember(key, v []byte) {
	if pp.rn > 0 {
		pp.r = append(pp.r, ',')
	}
	pp.rn++
	pp.r = append(append(append(append(pp.r, '"'), key...), '"', ':'), v...)
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
	member := func(key []byte) { dst = appendMemberKey(dst, &n, key) }
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

// appendMemberKey appends key's `"key":` to dst, the object's n-th
// member: after a comma unless it is the first. The merge patch's writers
// (mergeObjects, applyReverseIn, applyReverseChain) build objects member
// by member with it.
func appendMemberKey(dst []byte, n *int, key []byte) []byte {
	if *n > 0 {
		dst = append(dst, ',')
	}
	*n++
	return append(append(append(dst, '"'), key...), '"', ':')
}

// closeWithRest ends an object written member by member (n of them) with
// rest, the source's members after the last one a patch touched, each
// after a comma (the first comma dropped when nothing was written before).
func closeWithRest(dst, rest []byte, n int) []byte {
	if n == 0 && len(rest) > 0 {
		rest = rest[1:]
	}
	return append(append(dst, rest...), '}')
}
