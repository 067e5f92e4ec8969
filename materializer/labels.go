package materializer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

var errBadJSON = errors.New("malformed JSON object")

// ObjectLabels returns metadata.labels of a Kubernetes object's JSON, and
// checks the object's structure in the same single pass: the members of
// the object and of its metadata (keys, colons, commas), and elsewhere
// balanced brackets and terminated strings, with nothing after the object.
// That the object ends exactly where its brackets do matters beyond this
// function: list responses concatenate stored objects, so an object that
// closed early (`{...},{...}`) would add an item of its own making. It
// decodes only the labels: a full json.Unmarshal of a 3 KB Pod costs more
// than everything else Badger does per event, and json.Valid five times
// this walk.
func ObjectLabels(obj []byte) (map[string]string, error) {
	var labels map[string]string
	end, err := scanObject(obj, skipSpace(obj, 0), func(key, b []byte, i int) (int, error) {
		if string(key) != "metadata" {
			return skipValue(b, i)
		}
		return scanObject(b, i, func(key, b []byte, i int) (int, error) {
			e, err := skipValue(b, i)
			if err != nil || string(key) != "labels" || string(b[i:e]) == "null" {
				return e, err
			}
			if labels, err = stringMap(b[i:e]); err != nil {
				return 0, fmt.Errorf("metadata.labels: %w", err)
			}
			return e, nil
		})
	})
	if err != nil {
		return nil, err
	}
	if skipSpace(obj, end) != len(obj) {
		return nil, fmt.Errorf("%w: trailing data after the object", errBadJSON)
	}
	return labels, nil
}

// stringMap decodes a JSON object of strings. Label keys and values rarely
// hold escapes, so they are taken verbatim unless they do; json.Unmarshal
// of the whole map cost as much as the rest of the walk.
func stringMap(b []byte) (map[string]string, error) {
	m := map[string]string{}
	err := walkObject(b, func(k, v []byte) error {
		if len(v) == 0 || v[0] != '"' {
			return fmt.Errorf("%w: value of %q is not a string", errBadJSON, k)
		}
		key, err := unquote(k)
		if err != nil {
			return err
		}
		val, err := unquote(v[1 : len(v)-1])
		if err != nil {
			return err
		}
		m[key] = val
		return nil
	})
	return m, err
}

// unquote decodes the inside of a JSON string.
func unquote(s []byte) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), nil
	}
	var out string
	q := make([]byte, 0, len(s)+2)
	q = append(append(append(q, '"'), s...), '"')
	if err := json.Unmarshal(q, &out); err != nil {
		return "", fmt.Errorf("%w: %v", errBadJSON, err)
	}
	return out, nil
}

// walkObject calls f with every member of the JSON object that is all of b.
func walkObject(b []byte, f func(key, val []byte) error) error {
	end, err := scanObject(b, skipSpace(b, 0), func(key, b []byte, i int) (int, error) {
		e, err := skipValue(b, i)
		if err != nil {
			return 0, err
		}
		return e, f(key, b[i:e])
	})
	if err == nil && skipSpace(b, end) != len(b) {
		err = fmt.Errorf("%w: trailing data", errBadJSON)
	}
	return err
}

// scanObject reads the JSON object starting at b[i] and returns the offset
// just past it. It calls member with each key and the offset of its value,
// and member returns the offset just past the value (reading it in place,
// so an object inside is read once).
func scanObject(b []byte, i int, member func(key, b []byte, i int) (int, error)) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, fmt.Errorf("%w: not an object", errBadJSON)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, fmt.Errorf("%w: expected a key at offset %d", errBadJSON, i)
		}
		ke, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, fmt.Errorf("%w: expected ':' at offset %d", errBadJSON, i)
		}
		if i, err = member(key, b, skipSpace(b, i+1)); err != nil {
			return 0, err
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, fmt.Errorf("%w: unterminated object", errBadJSON)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("%w: unexpected %q at offset %d", errBadJSON, b[i], i)
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at b[i]=='"'.
// It looks for quotes only (a vectorised search) and counts the backslashes
// before one to tell an escaped quote.
func skipString(b []byte, i int) (int, error) {
	start := i + 1
	i = start
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return 0, fmt.Errorf("%w: unterminated string", errBadJSON)
		}
		i += j
		n := 0
		for k := i - 1; k >= start && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return i + 1, nil
		}
		i++
	}
}

// skipValue returns the offset just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: missing value", errBadJSON)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, fmt.Errorf("%w: unbalanced brackets", errBadJSON)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("%w: missing value at offset %d", errBadJSON, i)
	}
	return j, nil
}
