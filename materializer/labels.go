package materializer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

var errBadJSON = errors.New("malformed JSON object")

// errStop ends a walk early.
var errStop = errors.New("stop")

// ObjectLabels returns metadata.labels of a Kubernetes object's JSON. It
// checks the structure (balanced brackets, terminated strings) of what it
// reads up to metadata, and that the object is closed, but decodes only the
// labels: a full json.Unmarshal of a 3 KB Pod costs more than everything
// else Badger does per event.
func ObjectLabels(obj []byte) (map[string]string, error) {
	var labels map[string]string
	if t := bytes.TrimRight(obj, " \t\r\n"); len(t) == 0 || t[len(t)-1] != '}' {
		return nil, fmt.Errorf("%w: not a closed object", errBadJSON)
	}
	err := walkObject(obj, func(key []byte, val []byte) error {
		if string(key) != "metadata" {
			return nil
		}
		return walkObjectThenStop(val, func(k, v []byte) error {
			if string(k) != "labels" || string(v) == "null" {
				return nil
			}
			var err error
			if labels, err = stringMap(v); err != nil {
				return fmt.Errorf("metadata.labels: %w", err)
			}
			return nil
		})
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return labels, err
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

// walkObjectThenStop walks the object in b, then ends the enclosing walk.
func walkObjectThenStop(b []byte, f func(key, val []byte) error) error {
	if err := walkObject(b, f); err != nil {
		return err
	}
	return errStop
}

// walkObject calls f with every member of the JSON object in b.
func walkObject(b []byte, f func(key, val []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return fmt.Errorf("%w: not an object", errBadJSON)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipSpace(b, i+1) != len(b) {
			return fmt.Errorf("%w: trailing data", errBadJSON)
		}
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return fmt.Errorf("%w: expected a key at offset %d", errBadJSON, i)
		}
		ke, err := skipString(b, i)
		if err != nil {
			return err
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return fmt.Errorf("%w: expected ':' at offset %d", errBadJSON, i)
		}
		i = skipSpace(b, i+1)
		ve, err := skipValue(b, i)
		if err != nil {
			return err
		}
		if err := f(key, b[i:ve]); err != nil {
			return err
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return fmt.Errorf("%w: unterminated object", errBadJSON)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			if skipSpace(b, i+1) != len(b) {
				return fmt.Errorf("%w: trailing data", errBadJSON)
			}
			return nil
		default:
			return fmt.Errorf("%w: unexpected %q at offset %d", errBadJSON, b[i], i)
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
