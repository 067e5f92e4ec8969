package badger

import (
	"bytes"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// applyReverseChain is applyReverseIn applied once per patch, in order
// (patches[0] to doc first, each later one to the result before it), in
// one walk of doc: a state far back in a long chain (up to
// SnapshotEvery-1 reverse patches since whole states are kept by the
// chain's cost, chainCost) was one copy and walk of the whole object per
// patch, where the patches are small and touch the same few members (a
// Pod's labels and resourceVersion). Here each level of doc that a patch
// enters is walked once, and each member's value is folded through the
// patches in order before it is written: the last value set wins, a null
// removes the member (a later patch adding it back appends it, as its
// own apply would), nested objects merge (their patches gathered and
// applied at that level the same way), and members added by a patch
// come after the document's, in the order the patches added them. The
// bytes are the one-by-one result's, member order and white space
// included (FuzzApplyReverseChain, TestApplyReverseChain); like
// applyReverse it may take a document that is not valid JSON where that
// fails: a rebuild's states are the store's own JSON, checked when
// stored. md is where doc's top-level metadata value lies, as for
// applyReverseIn (zero: not known).
func applyReverseChain(doc []byte, patches [][]byte, md rawjson.Span) ([]byte, error) {
	switch len(patches) {
	case 0:
		return doc, nil
	case 1:
		return applyReverseIn(doc, patches[0], md)
	}
	c := chainApply{w: reverseWalk{doc: doc, known: md, cleanFrom: -1}}
	if md.Start <= 0 || md.End > len(doc) || md.End-md.Start < 2 || doc[md.Start] != '{' || doc[md.End-1] != '}' {
		c.w.known = rawjson.Span{}
	}
	longest := 0
	// Sized for a patch of two members at each of three levels (a
	// Pod's label and resourceVersion under its metadata) to start
	// with. The scratch holds offsets, no pointers: a 127-patch chain's
	// is tens of KB, which the collector then need not scan.
	n := 2*len(patches) + 8
	c.srcs = patches
	c.ps = make([]chainPatch, 0, 3*len(patches)+8)
	c.pm, c.used, c.offs = make([]chainMember, 0, 2*n), make([]bool, 0, 2*n), make([]int, 0, 3*len(patches)+8)
	c.keys = make([][]byte, 0, 8)
	for i, p := range patches {
		c.ps = append(c.ps, chainPatch{src: i})
		longest = max(longest, len(p))
	}
	out, _, err := c.level(make([]byte, 0, len(doc)+longest), doc, 0, 0, len(patches), true, true, 0)
	return out, err
}

// chainPatch is one patch's object at some level: at
// chainApply.srcs[src][at].
type chainPatch struct{ src, at int }

// chainMember is a member of a patch's object, as offsets into the
// patch: its key's bytes and its value's.
type chainMember struct{ ks, ke, vs, ve int }

// chainApply is one applyReverseChain: the document (w, with what is
// known of it) and the levels' scratch, each a stack a level pushes on
// and pops when done, so a chain's rebuild allocates them once: ps the
// patches entering each level, pm their members (used: which a member
// of the document met, as applyObject's find marks them), offs where
// each patch's members start, keys the distinct keys of a level's
// patches.
type chainApply struct {
	w    reverseWalk
	srcs [][]byte // the patches
	ps   []chainPatch
	pm   []chainMember
	used []bool
	offs []int
	keys [][]byte
}

// chainEntry is a member a patch added to a level (it was not in the
// document there, or a patch before removed it): its value (a patch's,
// at src[at:end]) and the patches merged into it since (ps).
type chainEntry struct {
	key     []byte
	src     []byte
	at, end int
	ps      []chainPatch
	alive   bool
}

// level appends the object at src[at] patched by c.ps[p0:p1] in order
// and returns the offset past the object in src. inDoc says src is the
// document itself (its known span and tail can be used: reverseWalk),
// top that this is its top level; end, when not 0, is the offset past
// this object's closing brace (a nested level whose end the known span
// gives).
func (c *chainApply) level(dst, src []byte, at, p0, p1 int, inDoc, top bool, end int) ([]byte, int, error) {
	m := p1 - p0
	o0, k0, key0 := len(c.offs), len(c.pm), len(c.keys)
	defer func() {
		c.offs, c.pm, c.used, c.keys = c.offs[:o0], c.pm[:k0], c.used[:k0], c.keys[:key0]
	}()
	var mbuf [32]rawjson.Member
	for i := p0; i < p1; i++ {
		c.offs = append(c.offs, len(c.pm))
		b := c.srcs[c.ps[i].src]
		ms, _, err := rawjson.Members(b, c.ps[i].at, mbuf[:0])
		if err != nil {
			return nil, 0, err
		}
		for _, m := range ms {
			ks := m.Start + 1 // the key's bytes follow its quote
			c.pm = append(c.pm, chainMember{ks: ks, ke: ks + len(m.Key), vs: m.ValueStart, ve: m.ValueEnd})
		}
	}
	c.offs = append(c.offs, len(c.pm))
	for j := len(c.used); j < len(c.pm); j++ {
		c.used = append(c.used, false)
	}
	left := len(c.pm) - k0 // the patches' members not met yet
	for i := range m {
		b := c.srcs[c.ps[p0+i].src]
		for j := c.offs[o0+i]; j < c.offs[o0+i+1]; j++ {
			if k := b[c.pm[j].ks:c.pm[j].ke]; !hasKey(c.keys[key0:], k) {
				c.keys = append(c.keys, k)
			}
		}
	}
	// find is the first member of patch i named key that no member met.
	find := func(i int, key []byte) int {
		b := c.srcs[c.ps[p0+i].src]
		for j := c.offs[o0+i]; j < c.offs[o0+i+1]; j++ {
			if !c.used[j] && bytes.Equal(b[c.pm[j].ks:c.pm[j].ke], key) {
				return j
			}
		}
		return -1
	}
	dst = append(dst, '{')
	n := 0
	member := func(key []byte) { dst = appendMemberKey(dst, &n, key) }
	skip := func(i int) (int, error) {
		if inDoc {
			return c.w.skip(i, top)
		}
		return rawjson.SkipValue(src, i)
	}
	var rest []byte // src's tail copied as it is (compactTail)
	restEnd := 0
	oend, err := rawjson.EachMember(src, at, func(d rawjson.Member) (int, error) {
		if !hasKey(c.keys[key0:], d.Key) {
			ve, err := skip(d.ValueStart)
			if err == nil {
				member(d.Key)
				dst = append(dst, src[d.ValueStart:ve]...)
			}
			return ve, err
		}
		// The member's value through the patches in order: its own
		// (vsrc nil) or the last one set (vsrc[vat:vend]), with the
		// object patches since gathered on c.ps from mark.
		mark := len(c.ps)
		var vsrc []byte
		vat, vend := d.ValueStart, 0
		isObj := src[d.ValueStart] == '{'
		alive := true
		for i := 0; i < m && alive; i++ {
			j := find(i, d.Key)
			if j < 0 {
				continue
			}
			c.used[j] = true
			left--
			src := c.ps[p0+i].src
			b, pm := c.srcs[src], c.pm[j]
			pv := b[pm.vs:pm.ve]
			switch {
			case string(pv) == "null":
				alive = false
			case pv[0] == '{' && isObj:
				c.ps = append(c.ps, chainPatch{src: src, at: pm.vs})
			default:
				vsrc, vat, vend, isObj = b, pm.vs, pm.ve, pv[0] == '{'
				c.ps = c.ps[:mark]
			}
		}
		var ve int
		var err error
		switch {
		case !alive:
			ve, err = skip(d.ValueStart)
		case vsrc == nil && len(c.ps) > mark:
			member(d.Key)
			inner := 0
			if inDoc && top && c.w.known.End > 0 && d.ValueStart == c.w.known.Start {
				inner = c.w.known.End
			}
			dst, ve, err = c.level(dst, src, d.ValueStart, mark, len(c.ps), inDoc, false, inner)
		case vsrc == nil:
			// No patch's member was left for it (a key the document
			// holds twice, met by the first): copied.
			if ve, err = skip(d.ValueStart); err == nil {
				member(d.Key)
				dst = append(dst, src[d.ValueStart:ve]...)
			}
		default:
			if ve, err = skip(d.ValueStart); err == nil {
				member(d.Key)
				if len(c.ps) > mark {
					dst, _, err = c.level(dst, vsrc, vat, mark, len(c.ps), false, false, 0)
				} else {
					dst = append(dst, vsrc[vat:vend]...)
				}
			}
		}
		c.ps = c.ps[:mark]
		if err == nil && left == 0 && inDoc {
			if t, e, ok := c.w.tail(ve, top, end); ok {
				rest, restEnd = t, e
				return ve, errTailCopied
			}
		}
		return ve, err
	})
	if rest != nil {
		// Every member of every patch was met: none is added.
		return closeWithRest(dst, rest, n), restEnd, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if left > 0 {
		for _, e := range c.added(p0, m, o0, find) {
			if !e.alive {
				continue
			}
			member(e.key)
			if len(e.ps) == 0 {
				dst = append(dst, e.src[e.at:e.end]...)
				continue
			}
			mark := len(c.ps)
			c.ps = append(c.ps, e.ps...)
			dst, _, err = c.level(dst, e.src, e.at, mark, len(c.ps), false, false, 0)
			c.ps = c.ps[:mark]
			if err != nil {
				return nil, 0, err
			}
		}
	}
	return append(dst, '}'), oend, nil
}

// added is the members the level's patches (c.ps[p0:p0+m], whose
// members start at c.offs[o0:]) add, as applying them one by one does:
// patch i's members that no member met (find) and that are not null
// come after the level's members then, in order, each later patch
// acting on them as on any member (a removed one is not alive).
func (c *chainApply) added(p0, m, o0 int, find func(int, []byte) int) []chainEntry {
	var ents []chainEntry
	for i := range m {
		src := c.ps[p0+i].src
		b := c.srcs[src]
		for k := range ents {
			e := &ents[k]
			if !e.alive {
				continue
			}
			j := find(i, e.key)
			if j < 0 {
				continue
			}
			c.used[j] = true
			pm := c.pm[j]
			pv := b[pm.vs:pm.ve]
			switch {
			case string(pv) == "null":
				e.alive = false
			case pv[0] == '{' && e.src[e.at] == '{':
				e.ps = append(e.ps, chainPatch{src: src, at: pm.vs})
			default:
				e.src, e.at, e.end, e.ps = b, pm.vs, pm.ve, nil
			}
		}
		for j := c.offs[o0+i]; j < c.offs[o0+i+1]; j++ {
			pm := c.pm[j]
			if pv := b[pm.vs:pm.ve]; !c.used[j] && string(pv) != "null" {
				c.used[j] = true
				ents = append(ents, chainEntry{key: b[pm.ks:pm.ke], src: b, at: pm.vs, end: pm.ve, alive: true})
			}
		}
	}
	return ents
}

// hasKey reports whether keys holds key.
func hasKey(keys [][]byte, key []byte) bool {
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}
