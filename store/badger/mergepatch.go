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
// own bytes. Applying a patch is the library's MergePatch, which keeps
// members in order.

var errNoPatch = errors.New("no merge patch expresses the change")

// rawMergePatch is the merge patch from old to cur, two JSON objects.
// errNoPatch when a merge patch cannot express the change (a member set
// to null, or either side not an object).
func rawMergePatch(old, cur []byte) ([]byte, error) {
	p, _, err := diffObject(make([]byte, 0, 128), old, 0, cur, 0)
	return p, err
}

// diffObject appends the patch from the object at old[oi] to the one at
// cur[ci] and reports whether it changes anything.
func diffObject(dst, old []byte, oi int, cur []byte, ci int) ([]byte, bool, error) {
	var obuf, cbuf [32]rawjson.Member
	om, _, err := rawjson.Members(old, oi, obuf[:0])
	if err != nil {
		return nil, false, errNoPatch
	}
	cm, _, err := rawjson.Members(cur, ci, cbuf[:0])
	if err != nil {
		return nil, false, errNoPatch
	}
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
	for _, c := range cm {
		cv := cur[c.ValueStart:c.ValueEnd]
		j := find(om, c.Key, used)
		if j < 0 {
			if string(cv) == "null" {
				return nil, false, errNoPatch
			}
			member(c.Key)
			dst = append(dst, cv...)
			continue
		}
		used[j] = true
		ov := old[om[j].ValueStart:om[j].ValueEnd]
		if bytes.Equal(ov, cv) {
			continue
		}
		if ov[0] == '{' && cv[0] == '{' {
			mark, markN := len(dst), n
			member(c.Key)
			var changed bool
			if dst, changed, err = diffObject(dst, old, om[j].ValueStart, cur, c.ValueStart); err != nil {
				return nil, false, err
			}
			if !changed {
				dst, n = dst[:mark], markN
			}
			continue
		}
		if string(cv) == "null" {
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

// find is the index of the unused member named key, or -1.
func find(ms []rawjson.Member, key []byte, used []bool) int {
	for j, m := range ms {
		if !used[j] && bytes.Equal(m.Key, key) {
			return j
		}
	}
	return -1
}
