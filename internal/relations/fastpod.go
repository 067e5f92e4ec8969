package relations

import (
	"errors"
	"unicode/utf8"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// A Pod is most of what a store applies, and decoding its relation fields
// with encoding/json (reflection, a map per object level, a string per
// member) was the largest part of what keeping relations cost an initial
// load (docs/benchmarks/relations.md). extractPod reads the same fields in
// place with rawjson. It reads only what it is sure encoding/json reads
// the same way and gives up on anything else (errFallback), so Extract
// then decodes the object as before: a key in another case or with
// escapes (encoding/json matches keys case-insensitively), a key twice
// (encoding/json merges), a value of another type (encoding/json fails),
// a string with escapes or control bytes, and, in a Pod's spec, the
// members of other kinds that objSpec also decodes. Real apiservers write
// none of these. FuzzExtractPod checks the two agree.

// errFallback: extractPod met something it leaves to encoding/json.
var errFallback = errors.New("decode with encoding/json")

// Keys of each object level extractPod reads, as objSpec and its parts
// name them; the order is the index a reader's callback gets.
var (
	topKeys       = []string{"kind", "metadata", "spec"}
	metaKeys      = []string{"name", "ownerReferences"}
	ownerKeys     = []string{"apiVersion", "kind", "name"}
	podSpecKeys   = []string{"nodeName", "serviceAccountName", "volumes", "containers", "initContainers", "ephemeralContainers", "imagePullSecrets"}
	otherSpecKeys = []string{"selector", "podSelector", "volumeName", "defaultBackend", "rules", "scaleTargetRef"}
	volumeKeys    = []string{"configMap", "secret", "persistentVolumeClaim", "projected"}
	nameKeys      = []string{"name"}
	secretKeys    = []string{"secretName"}
	claimKeys     = []string{"claimName"}
	projKeys      = []string{"sources"}
	sourceKeys    = []string{"configMap", "secret"}
	containerKeys = []string{"envFrom", "env"}
	envFromKeys   = []string{"configMapRef", "secretRef"}
	envKeys       = []string{"valueFrom"}
	valueFromKeys = []string{"configMapKeyRef", "secretKeyRef"}
)

// extractPod is Extract of a Pod in namespace ns, or errFallback.
func extractPod(ns string, obj []byte) (Relations, error) {
	p := podReader{b: obj, ns: ns, refs: make([]Ref, 0, 8)}
	end, err := members(obj, 0, topKeys, nil, func(k, i int) (int, error) {
		switch k {
		case 0:
			kind, end, err := str(obj, i)
			p.kind = kind
			return end, err
		case 1:
			return members(obj, i, metaKeys, nil, p.meta)
		}
		return p.spec(i)
	})
	if err != nil {
		return Relations{}, err
	}
	if i := rawjson.SkipSpace(obj, end); i != len(obj) {
		return Relations{}, errFallback
	}
	r := Relations{Kind: p.kind, Refs: dedupe(p.refs)}
	if len(r.Refs) == 0 {
		r.Refs = nil // as encoding/json's path leaves it
	}
	return r, nil
}

// podReader is extractPod's state: the object, its namespace, and what
// it read so far.
type podReader struct {
	b    []byte
	ns   string
	kind string
	refs []Ref
}

func (p *podReader) add(t EdgeType, group, kind, name string) {
	if name == "" {
		return
	}
	tns := p.ns
	if ClusterScoped(group, kind) {
		tns = ""
	}
	p.refs = append(p.refs, Ref{Type: t, Target: Target{Group: group, Kind: kind, Namespace: tns, Name: name}})
}

// meta reads metadata's member k at b[i].
func (p *podReader) meta(k, i int) (int, error) {
	if k == 0 {
		_, end, err := str(p.b, i)
		return end, err
	}
	return elements(p.b, i, func(i int) (int, error) {
		var o [3]string
		end, err := members(p.b, i, ownerKeys, nil, func(k, i int) (int, error) {
			s, end, err := str(p.b, i)
			o[k] = s
			return end, err
		})
		if o[1] != "" {
			p.add(Owner, groupOf(o[0]), o[1], o[2])
		}
		return end, err
	})
}

// ref reads {"<keys[0]>": "<name>"} at b[i] and adds a reference to the
// kind's object of that name.
func (p *podReader) ref(i int, keys []string, kind string) (int, error) {
	return members(p.b, i, keys, nil, func(_, j int) (int, error) {
		name, end, err := str(p.b, j)
		p.add(References, "", kind, name)
		return end, err
	})
}

// cmOrSecret reads a {configMap..., secret...}-like object's member k (0:
// a ConfigMap's reference, 1: a Secret's) at b[i].
func (p *podReader) cmOrSecret(k, i int) (int, error) {
	if k == 0 {
		return p.ref(i, nameKeys, "ConfigMap")
	}
	return p.ref(i, nameKeys, "Secret")
}

// spec reads a Pod's spec at b[i].
func (p *podReader) spec(i int) (int, error) {
	return members(p.b, i, podSpecKeys, otherSpecKeys, p.specMember)
}

// specMember reads a Pod spec's member podSpecKeys[k] at b[i].
func (p *podReader) specMember(k, i int) (int, error) {
	b := p.b
	switch k {
	case 0, 1:
		name, end, err := str(b, i)
		if k == 0 {
			p.add(References, "", "Node", name)
		} else {
			p.add(References, "", "ServiceAccount", name)
		}
		return end, err
	case 2:
		return elements(b, i, p.volume)
	case 3, 4, 5:
		return elements(b, i, p.container)
	}
	return elements(b, i, func(i int) (int, error) { return p.ref(i, nameKeys, "Secret") })
}

// volume reads one element of spec.volumes at b[i].
func (p *podReader) volume(i int) (int, error) {
	return members(p.b, i, volumeKeys, nil, func(k, i int) (int, error) {
		switch k {
		case 0:
			return p.ref(i, nameKeys, "ConfigMap")
		case 1:
			return p.ref(i, secretKeys, "Secret")
		case 2:
			return p.ref(i, claimKeys, "PersistentVolumeClaim")
		}
		return members(p.b, i, projKeys, nil, func(_, i int) (int, error) {
			return elements(p.b, i, func(i int) (int, error) {
				return members(p.b, i, sourceKeys, nil, p.cmOrSecret)
			})
		})
	})
}

// container reads one container at b[i]: its envFrom and env.
func (p *podReader) container(i int) (int, error) {
	return members(p.b, i, containerKeys, nil, p.containerMember)
}

// containerMember reads a container's member containerKeys[k] at b[i].
func (p *podReader) containerMember(k, i int) (int, error) {
	if k == 0 {
		return elements(p.b, i, func(i int) (int, error) {
			return members(p.b, i, envFromKeys, nil, p.cmOrSecret)
		})
	}
	return elements(p.b, i, func(i int) (int, error) {
		return members(p.b, i, envKeys, nil, func(_, i int) (int, error) {
			return members(p.b, i, valueFromKeys, nil, p.cmOrSecret)
		})
	})
}

// members calls f with each member of the object at b[i] whose key is one
// of keys (its index) and skips the others; null is an object without
// members. It gives up (errFallback) on what encoding/json might read
// otherwise: a key that is one of keys or others but for case, or has
// escapes or non-ASCII bytes, one of keys twice, or a value that is not an
// object.
func members(b []byte, i int, keys, others []string, f func(k, i int) (int, error)) (int, error) {
	i = rawjson.SkipSpace(b, i)
	if end, ok := null(b, i); ok {
		return end, nil
	}
	if i >= len(b) || b[i] != '{' {
		return 0, errFallback
	}
	var seen uint64
	end, err := rawjson.EachMember(b, i, func(m rawjson.Member) (int, error) {
		for _, c := range m.Key {
			if c == '\\' || c >= utf8.RuneSelf {
				return 0, errFallback
			}
		}
		for k, want := range keys {
			if string(m.Key) == want {
				if seen&(1<<k) != 0 {
					return 0, errFallback
				}
				seen |= 1 << k
				return f(k, m.ValueStart)
			}
			if foldEqual(m.Key, want) {
				return 0, errFallback
			}
		}
		for _, o := range others {
			if foldEqual(m.Key, o) {
				return 0, errFallback
			}
		}
		return rawjson.SkipValue(b, m.ValueStart)
	})
	if err != nil {
		return 0, errFallback
	}
	return end, nil
}

// elements calls f with the offset of each element of the array at b[i];
// null is an empty array.
func elements(b []byte, i int, f func(i int) (int, error)) (int, error) {
	i = rawjson.SkipSpace(b, i)
	if end, ok := null(b, i); ok {
		return end, nil
	}
	if i >= len(b) || b[i] != '[' {
		return 0, errFallback
	}
	i = rawjson.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := f(i)
		if err != nil {
			return 0, errFallback
		}
		if i = rawjson.SkipSpace(b, end); i >= len(b) {
			return 0, errFallback
		}
		switch b[i] {
		case ',':
			i = rawjson.SkipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errFallback
		}
	}
}

// str is the string at b[i] (null: ""), and the offset past it. A string
// with escapes or bytes encoding/json would replace is left to it.
func str(b []byte, i int) (string, int, error) {
	i = rawjson.SkipSpace(b, i)
	if end, ok := null(b, i); ok {
		return "", end, nil
	}
	if i >= len(b) || b[i] != '"' {
		return "", 0, errFallback
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !utf8.Valid(s) {
				return "", 0, errFallback
			}
			return string(s), j + 1, nil
		case c == '\\' || c < 0x20:
			return "", 0, errFallback
		}
	}
	return "", 0, errFallback
}

// null reports whether b[i] is the literal null, and the offset past it.
func null(b []byte, i int) (int, bool) {
	if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
		return i + 4, true
	}
	return 0, false
}

// foldEqual reports whether the ASCII key equals want but for case.
func foldEqual(key []byte, want string) bool {
	if len(key) != len(want) {
		return false
	}
	for j := range key {
		a, b := key[j], want[j]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
