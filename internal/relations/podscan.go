package relations

import "github.com/fleetview/fleetview/internal/rawjson"

// A store that hashes the part of a Pod relations come from first walks
// the Pod to copy that part into a small document, and Extract then read
// the document again: two passes over the same bytes, the second about
// as costly as the first (docs/benchmarks/relations.md). PodScan reads the
// references in the walk itself: the walker hands it each value it would
// copy, PodScan reads the value in place and tells the walker where it
// ends, as rawjson.SkipValue would. What it reads is what Extract reads of
// the document the walker builds from the same values, or it says it
// cannot (Relations' false; the walker then calls Extract on the
// document): it gives up wherever extractPod gives up on the document
// (the same reader runs on the same bytes), and wherever the walk could
// replace a value it already read (a member twice). store/badger's
// FuzzRelScanPod checks the two agree.

// PodScan reads the references of one Pod from the values its walker
// hands it. The zero value is ready for Reset.
type PodScan struct {
	p      podReader
	failed bool
	// Members met, each once at most: top-level kind, metadata and
	// spec (topKeys' bits), metadata's ownerReferences, spec's
	// podSpecKeys, and the current container's containerKeys.
	top, meta, spec, cont uint64
}

// Reset starts reading the Pod obj in namespace ns (nil: none, to keep
// nothing of the last). obj is read until the next Reset.
func (s *PodScan) Reset(obj []byte, ns string) {
	*s = PodScan{p: podReader{b: obj, ns: ns}}
	if obj != nil {
		s.p.refs = make([]Ref, 0, 8) // returned by Relations: not reused
	}
}

// Fail says the walk met something the document would not show as read
// here.
func (s *PodScan) Fail() { s.failed = true }

// once marks bit k of *seen and reports whether it was clear; a second
// member fails the scan.
func (s *PodScan) once(seen *uint64, k int) bool {
	if *seen&(1<<k) != 0 {
		s.failed = true
		return false
	}
	*seen |= 1 << k
	return true
}

// Top is called with each top-level member the walk reads whose key is
// kind, metadata or spec: the document holds one of each, so a second
// fails the scan.
func (s *PodScan) Top(key []byte) {
	for k, want := range topKeys {
		if string(key) == want {
			s.once(&s.top, k)
			return
		}
	}
}

// read runs f at b[i] unless the scan failed; it returns the end of the
// value at b[i], as rawjson.SkipValue does, whatever f read.
func (s *PodScan) read(i int, f func(i int) (int, error)) (int, error) {
	if !s.failed {
		if end, err := f(i); err == nil {
			return end, nil
		}
		s.failed = true
	}
	return rawjson.SkipValue(s.p.b, i)
}

// Owners reads metadata.ownerReferences at b[i] (an array: the document
// leaves out any other value).
func (s *PodScan) Owners(i int) (int, error) {
	if !s.once(&s.meta, 0) || i >= len(s.p.b) || s.p.b[i] != '[' {
		return rawjson.SkipValue(s.p.b, i)
	}
	n := len(s.p.refs)
	end, err := s.read(i, func(i int) (int, error) { return s.p.meta(1, i) })
	if n > 0 && !s.failed {
		// Read after spec (the walker meets members in the object's
		// order): the document's owners come first, and dedupe's order
		// of refs that compare equal depends on where it found them.
		refs := s.p.refs
		moved := append(append(make([]Ref, 0, len(refs)), refs[n:]...), refs[:n]...)
		copy(refs, moved)
	}
	return end, err
}

// SpecMember reads spec's member key at b[i], one the document keeps
// (selector, podSelector, nodeName, serviceAccountName, volumes,
// imagePullSecrets, volumeName, defaultBackend, rules, scaleTargetRef):
// extractPod gives up on another kind's.
func (s *PodScan) SpecMember(key []byte, i int) (int, error) {
	k := -1
	for j, want := range podSpecKeys {
		if string(key) == want {
			k = j
		}
	}
	switch k {
	case 0, 1, 2, 6:
		if s.once(&s.spec, k) {
			return s.read(i, func(i int) (int, error) { return s.p.specMember(k, i) })
		}
	default:
		s.failed = true
	}
	return rawjson.SkipValue(s.p.b, i)
}

// ContainerList is called when the walk keeps spec's container list key
// (an array); Container at each of its objects, ContainerMember with each
// of that object's envFrom and env.
func (s *PodScan) ContainerList(key []byte) {
	for k := 3; k <= 5; k++ {
		if string(key) == podSpecKeys[k] {
			s.once(&s.spec, k)
			return
		}
	}
	s.failed = true
}

// Container starts one object of a container list.
func (s *PodScan) Container() { s.cont = 0 }

// ContainerMember reads a container's envFrom or env at b[i].
func (s *PodScan) ContainerMember(key []byte, i int) (int, error) {
	for k, want := range containerKeys {
		if string(key) == want {
			if s.once(&s.cont, k) {
				return s.read(i, func(i int) (int, error) { return s.p.containerMember(k, i) })
			}
			break
		}
	}
	s.failed = true
	return rawjson.SkipValue(s.p.b, i)
}

// Relations is what Extract reads of the walk's document, whose kind
// member is kind (the object's kind value, or nil: none); false when the
// scan cannot say (then Extract the document).
func (s *PodScan) Relations(kind []byte) (Relations, bool) {
	if s.failed {
		return Relations{}, false
	}
	var r Relations
	if len(kind) > 0 && kind[0] == '"' {
		k, _, err := str(kind, 0)
		if err != nil {
			return Relations{}, false
		}
		r.Kind = k
	}
	if r.Refs = dedupe(s.p.refs); len(r.Refs) == 0 {
		r.Refs = nil
	}
	return r, true
}
