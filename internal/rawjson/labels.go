package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	var labels map[string]string
	end, err := EachMember(obj, 0, func(m Member) (int, error) {
		if string(m.Key) != "metadata" {
			return SkipValue(obj, m.ValueStart)
		}
		return EachMember(obj, m.ValueStart, func(m Member) (int, error) {
			if string(m.Key) != "labels" {
				return SkipValue(obj, m.ValueStart)
			}
			if i := m.ValueStart; i < len(obj) && obj[i] == 'n' {
				return literal(obj, i, "null")
			}
			l, e, err := stringMap(obj, m.ValueStart)
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
// offset just past it.
func stringMap(b []byte, i int) (map[string]string, int, error) {
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
