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
	var r Relations
	add := func(t EdgeType, group, kind, name string) {
		if name == "" {
			return
		}
		tns := ns
		if ClusterScoped(group, kind) {
			tns = ""
		}
		r.Refs = append(r.Refs, Ref{Type: t, Target: Target{Group: group, Kind: kind, Namespace: tns, Name: name}})
	}
	// ref reads {"<key>": "<name>"} at b[i] and adds a reference to it.
	ref := func(keys []string, kind string) func(int, int) (int, error) {
		return func(_, i int) (int, error) {
			return members(obj, i, keys, nil, func(_, j int) (int, error) {
				name, end, err := str(obj, j)
				add(References, "", kind, name)
				return end, err
			})
		}
	}
	end, err := members(obj, 0, topKeys, nil, func(k, i int) (int, error) {
		switch k {
		case 0:
			kind, end, err := str(obj, i)
			r.Kind = kind
			return end, err
		case 1:
			return members(obj, i, metaKeys, nil, func(k, i int) (int, error) {
				if k == 0 {
					_, end, err := str(obj, i)
					return end, err
				}
				return elements(obj, i, func(i int) (int, error) {
					var o [3]string
					end, err := members(obj, i, ownerKeys, nil, func(k, i int) (int, error) {
						s, end, err := str(obj, i)
						o[k] = s
						return end, err
					})
					if o[1] != "" {
						add(Owner, groupOf(o[0]), o[1], o[2])
					}
					return end, err
				})
			})
		}
		return podSpec(obj, i, add, ref)
	})
	if err != nil {
		return Relations{}, err
	}
	if i := rawjson.SkipSpace(obj, end); i != len(obj) {
		return Relations{}, errFallback
	}
	r.Refs = dedupe(r.Refs)
	return r, nil
}

// podSpec reads a Pod's spec at obj[i].
func podSpec(obj []byte, i int, add func(t EdgeType, group, kind, name string), ref func([]string, string) func(int, int) (int, error)) (int, error) {
	return members(obj, i, podSpecKeys, otherSpecKeys, func(k, i int) (int, error) {
		switch k {
		case 0, 1:
			name, end, err := str(obj, i)
			if k == 0 {
				add(References, "", "Node", name)
			} else {
				add(References, "", "ServiceAccount", name)
			}
			return end, err
		case 2:
			return elements(obj, i, func(i int) (int, error) {
				return members(obj, i, volumeKeys, nil, func(k, i int) (int, error) {
					switch k {
					case 0:
						return ref(nameKeys, "ConfigMap")(0, i)
					case 1:
						return ref(secretKeys, "Secret")(0, i)
					case 2:
						return ref(claimKeys, "PersistentVolumeClaim")(0, i)
					}
					return members(obj, i, projKeys, nil, func(_, i int) (int, error) {
						return elements(obj, i, func(i int) (int, error) {
							return members(obj, i, sourceKeys, nil, func(k, i int) (int, error) {
								if k == 0 {
									return ref(nameKeys, "ConfigMap")(0, i)
								}
								return ref(nameKeys, "Secret")(0, i)
							})
						})
					})
				})
			})
		case 3, 4, 5:
			return elements(obj, i, func(i int) (int, error) {
				return members(obj, i, containerKeys, nil, func(k, i int) (int, error) {
					if k == 0 {
						return elements(obj, i, func(i int) (int, error) {
							return members(obj, i, envFromKeys, nil, func(k, i int) (int, error) {
								if k == 0 {
									return ref(nameKeys, "ConfigMap")(0, i)
								}
								return ref(nameKeys, "Secret")(0, i)
							})
						})
					}
					return elements(obj, i, func(i int) (int, error) {
						return members(obj, i, envKeys, nil, func(_, i int) (int, error) {
							return members(obj, i, valueFromKeys, nil, func(k, i int) (int, error) {
								if k == 0 {
									return ref(nameKeys, "ConfigMap")(0, i)
								}
								return ref(nameKeys, "Secret")(0, i)
							})
						})
					})
				})
			})
		}
		return elements(obj, i, func(i int) (int, error) {
			return ref(nameKeys, "Secret")(0, i)
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
