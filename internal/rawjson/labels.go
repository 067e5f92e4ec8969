package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Labels returns metadata.labels of a Kubernetes object's JSON (nil when
// absent or null) and checks the whole object in the same single pass, as
// Check does. Labels must be an object of strings. Of several metadata or
// labels members the last labels that are not null win.
//
// It decodes only the labels: a full json.Unmarshal of a 3 KB Pod costs
// more than everything else a backend does per event, and json.Valid
// several times this walk.
func Labels(obj []byte) (map[string]string, error) {
	if err := checkSize(obj); err != nil {
		return nil, err
	}
	var labels map[string]string
	end, err := EachMember(obj, 0, func(m Member) (int, error) {
		if string(m.Key) != "metadata" {
			return SkipValue(obj, m.ValueStart)
		}
		return EachMember(obj, m.ValueStart, func(m Member) (int, error) {
			if string(m.Key) != "labels" {
				return skipValue(obj, m.ValueStart, 2)
			}
			if i := m.ValueStart; i < len(obj) && obj[i] == 'n' {
				return literal(obj, i, "null")
			}
			l, e, err := stringMap(obj, m.ValueStart, nil)
			if err != nil {
				return 0, fmt.Errorf("metadata.labels: %w", err)
			}
			labels = l
			return e, nil
		})
	})
	if err != nil {
		return nil, err
	}
	if err := checkEnd(obj, end); err != nil {
		return nil, err
	}
	return labels, nil
}

// stringMap decodes the JSON object of strings at b[i] and returns the
// offset just past it; with text set, it also appends each key and value
// there, in the object's order (appendFields).
func stringMap(b []byte, i int, text *[]byte) (map[string]string, int, error) {
	m := map[string]string{}
	end, err := EachMember(b, i, func(mb Member) (int, error) {
		vs := mb.ValueStart
		if vs >= len(b) || b[vs] != '"' {
			return 0, syntax(fmt.Sprintf("value of %q is not a string", mb.Key), vs)
		}
		ve, err := skipString(b, vs)
		if err != nil {
			return 0, err
		}
		key, err := unquote(mb.Key, mb.Start+1)
		if err != nil {
			return 0, err
		}
		val, err := unquote(b[vs+1:ve-1], vs+1)
		if err != nil {
			return 0, err
		}
		m[key] = val
		if text != nil {
			if *text, err = appendFields(*text, mb, b[vs+1:ve-1], vs+1); err != nil {
				return 0, err
			}
		}
		return ve, nil
	})
	return m, end, err
}

// unquote decodes the inside of a JSON string found at offset off. Label
// keys and values rarely hold escapes, so they are taken verbatim unless
// they do; json.Unmarshal of the whole map cost as much as the rest of the
// walk.
func unquote(s []byte, off int) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), nil
	}
	var out string
	q := make([]byte, 0, len(s)+2)
	q = append(append(append(q, '"'), s...), '"')
	if err := json.Unmarshal(q, &out); err != nil {
		return "", syntax(err.Error(), off)
	}
	return out, nil
}

// LabelsAnnotationsText is Labels, also returning every value the
// annotation keys have in metadata.annotations that is not want, and
// appending to text what a free-text search matches in the object beyond
// its name and namespace, all in the same single pass.
//
// The values: each occurrence, in every metadata member, so a value a
// duplicate key hides from one decoder cannot pass unseen to another. Keys
// of metadata, its members and annotations are compared decoded, so an
// escaped spelling is the same key. Values of keys must be strings. A value
// equal to want costs nothing: the materializer checks every object's
// cluster annotations with it.
//
// The text: the keys and values of metadata.labels and of
// metadata.annotations in the object's order, each lower-cased as
// strings.ToLower would and followed by a 0 byte, except the annotations
// in keys (whose values are want: the cluster's name). Annotation values
// that are not strings are left out.
func LabelsAnnotationsText(obj []byte, want string, text []byte, keys ...string) (map[string]string, []string, []byte, error) {
	if text == nil {
		text = make([]byte, 0, 256)
	}
	return labelsAnnotations(obj, want, &text, keys)
}

func labelsAnnotations(obj []byte, want string, text *[]byte, keys []string) (map[string]string, []string, []byte, error) {
	if err := checkSize(obj); err != nil {
		return nil, nil, nil, err
	}
	var labels map[string]string
	var values []string
	end, err := EachMember(obj, 0, func(m Member) (int, error) {
		if ok, err := keyIs(m, "metadata"); err != nil || !ok {
			if err != nil {
				return 0, err
			}
			return SkipValue(obj, m.ValueStart)
		}
		return EachMember(obj, m.ValueStart, func(m Member) (int, error) {
			isLabels, err := keyIs(m, "labels")
			if err != nil {
				return 0, err
			}
			isAnn, err := keyIs(m, "annotations")
			if err != nil {
				return 0, err
			}
			if i := m.ValueStart; (isLabels || isAnn) && i < len(obj) && obj[i] == 'n' {
				return literal(obj, i, "null")
			}
			switch {
			case isLabels:
				// The text in the object's order, not the map's: equal
				// objects are equal bytes (a rebuilt store compares byte
				// for byte).
				l, e, err := stringMap(obj, m.ValueStart, text)
				if err != nil {
					return 0, fmt.Errorf("metadata.labels: %w", err)
				}
				labels = l
				return e, nil
			case isAnn:
				return EachMember(obj, m.ValueStart, func(a Member) (int, error) {
					wanted := false
					for _, k := range keys {
						ok, err := keyIs(a, k)
						if err != nil {
							return 0, err
						}
						wanted = wanted || ok
					}
					if !wanted {
						vs := a.ValueStart
						if vs >= len(obj) || obj[vs] != '"' {
							var err error
							if *text, err = appendFields(*text, a, nil, 0); err != nil {
								return 0, err
							}
							return skipValue(obj, vs, 3)
						}
						ve, err := skipString(obj, vs)
						if err == nil {
							*text, err = appendFields(*text, a, obj[vs+1:ve-1], vs+1)
						}
						return ve, err
					}
					vs := a.ValueStart
					if vs >= len(obj) || obj[vs] != '"' {
						return 0, syntax(fmt.Sprintf("annotation %q is not a string", a.Key), vs)
					}
					ve, err := skipString(obj, vs)
					if err != nil {
						return 0, err
					}
					raw := obj[vs+1 : ve-1]
					if bytes.IndexByte(raw, '\\') < 0 && string(raw) == want {
						return ve, nil
					}
					v, err := unquote(raw, vs+1)
					if err != nil {
						return 0, err
					}
					if v != want {
						values = append(values, v)
					}
					return ve, nil
				})
			}
			return skipValue(obj, m.ValueStart, 2)
		})
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkEnd(obj, end); err != nil {
		return nil, nil, nil, err
	}
	return labels, values, *text, nil
}

// appendFields appends m's key and, when value is not nil, the string
// inside value (at offset off), each lowered and ended by a 0 byte.
func appendFields(dst []byte, m Member, value []byte, off int) ([]byte, error) {
	dst, err := appendLower(dst, m.Key, m.Start+1)
	if err != nil {
		return nil, err
	}
	dst = append(dst, 0)
	if value == nil {
		return dst, nil
	}
	if dst, err = appendLower(dst, value, off); err != nil {
		return nil, err
	}
	return append(dst, 0), nil
}

// keyIs compares m's key, decoded, with want. Keys rarely hold escapes:
// without one the raw bytes are compared, which allocates nothing.
func keyIs(m Member, want string) (bool, error) {
	if bytes.IndexByte(m.Key, '\\') < 0 {
		return string(m.Key) == want, nil
	}
	k, err := unquote(m.Key, m.Start+1)
	return k == want, err
}

// appendLower appends the JSON string inside raw (found at offset off),
// decoded and lower-cased as strings.ToLower would. Plain ASCII, what
// names, labels and most annotations are, is lowered byte by byte.
func appendLower(dst, raw []byte, off int) ([]byte, error) {
	plain := bytes.IndexByte(raw, '\\') < 0
	for _, c := range raw {
		if c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		for _, c := range raw {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
		return dst, nil
	}
	s, err := unquote(raw, off)
	if err != nil {
		return nil, err
	}
	return append(dst, strings.ToLower(s)...), nil
}
