package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/fleetview/fleetview/internal/benchdata"
)

// FuzzScan checks the scanner against encoding/json. For any input, none
// of Check, ObjectMembers and Labels panics, and:
//
//  1. Check accepts exactly when, with every string emptied (blank):
//     strings all end, brackets match everywhere and nest no deeper than
//     encoding/json allows, and the top level, with each object or array
//     member value replaced by 0 (flatten), is json.Valid and an object.
//     That is, the top level is checked in full and nested values for
//     brackets and strings only (see SkipValue); in particular a
//     json.Valid object is always accepted.
//  2. ObjectMembers accepts exactly when Check does, with member spans
//     that hold json.Valid values when the input is valid; Labels accepts
//     only when Check does; every error wraps ErrMalformed.
//  3. For a json.Valid object in valid UTF-8, Labels equals what
//     encoding/json decodes from the last non-null metadata.labels (keys
//     matched as written, as the scanner does), and fails exactly when some
//     metadata is not an object or some labels are not null or an object of
//     strings.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"metadata":{"labels":{"a":"b"}}}`, `{"a":[1,{"b":null}],"c":"\"}"}`,
		`{"metadata":{"labels":null},"metadata":{"labels":{"k":"v\\"}}}`, `{"a":1}x`, `[1]`, `{"a":[1}]}`,
		`{"":10[]}`, // a nested value right after a number: invalid
	} {
		f.Add([]byte(s))
	}
	f.Add(benchdata.Pod("c", 1, 3))
	f.Fuzz(func(t *testing.T, in []byte) {
		err := Check(in)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Check error %v is not ErrMalformed", err)
		}
		b := blank(in)
		wantOK := b != nil && bracketsMatch(b) && isObject(b) && json.Valid(flatten(b))
		if (err == nil) != wantOK {
			t.Fatalf("Check(%q) = %v; blanked %q, flattened %q: want ok %v", in, err, b, flatten(b), wantOK)
		}
		valid := json.Valid(in) && isObject(in)
		if valid && err != nil {
			t.Fatalf("Check(%q) = %v for a valid object", in, err)
		}
		ms, merr := ObjectMembers(in, nil)
		if (merr == nil) != (err == nil) {
			t.Fatalf("ObjectMembers(%q) = %v, Check %v", in, merr, err)
		}
		labels, lerr := Labels(in)
		if lerr == nil && err != nil {
			t.Fatalf("Labels(%q) accepted what Check refused: %v", in, err)
		}
		if lerr != nil && !errors.Is(lerr, ErrMalformed) {
			t.Fatalf("Labels error %v is not ErrMalformed", lerr)
		}
		if !valid {
			return
		}
		for _, m := range ms {
			if !json.Valid(in[m.ValueStart:m.ValueEnd]) || in[m.Start] != '"' || !bytes.Equal(in[m.Start+1:m.Start+1+len(m.Key)], m.Key) {
				t.Fatalf("member %q of %q: span %q, value %q", m.Key, in, in[m.Start:m.End], in[m.ValueStart:m.ValueEnd])
			}
		}
		if !utf8.Valid(in) {
			return // the scanner keeps invalid UTF-8, encoding/json replaces it
		}
		want, ok := refLabels(in)
		if ok != (lerr == nil) || !maps.Equal(labels, want) || (labels == nil) != (want == nil) {
			t.Fatalf("Labels(%q) = %v, %v; encoding/json: %v, ok %v", in, labels, lerr, want, ok)
		}
	})
}

// bracketsMatch reports whether the brackets of a blanked input match and
// nest no deeper than encoding/json allows.
func bracketsMatch(b []byte) bool {
	var open []byte
	for _, c := range b {
		switch c {
		case '{', '[':
			if open = append(open, c); len(open) > maxDepth {
				return false
			}
		case '}', ']':
			if len(open) == 0 || open[len(open)-1] != map[byte]byte{'}': '{', ']': '['}[c] {
				return false
			}
			open = open[:len(open)-1]
		}
	}
	return len(open) == 0
}

// flatten replaces every object or array nested in the top-level value of
// a blanked input with 0.
func flatten(b []byte) []byte {
	out := make([]byte, 0, len(b))
	depth := 0
	for _, c := range b {
		switch c {
		case '{', '[':
			depth++
			if depth == 2 {
				// Spaced: a 0 right after a number would merge with it
				// ("10[]" is not "100").
				out = append(out, ' ', '0', ' ')
			}
			if depth >= 2 {
				continue
			}
		case '}', ']':
			depth--
			if depth >= 1 {
				continue
			}
		default:
			if depth >= 2 {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

func isObject(b []byte) bool {
	i := SkipSpace(b, 0)
	return i < len(b) && b[i] == '{'
}

// blank empties every string of b, tokenising strings the plain way (a
// backslash takes the next byte along); nil if a string is unterminated.
func blank(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			out = append(out, b[i])
			continue
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(b) {
			return nil
		}
		out = append(out, '"', '"')
		i = j
	}
	return out
}

type rawMember struct {
	key string // raw, with its quotes
	val json.RawMessage
}

// rawMembers lists the members of the valid JSON object b with their keys
// as written.
func rawMembers(b []byte) ([]rawMember, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []rawMember
	for dec.More() {
		start := dec.InputOffset()
		if _, err := dec.Token(); err != nil {
			return nil, false
		}
		key := bytes.TrimLeft(b[start:dec.InputOffset()], " \t\r\n,")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, rawMember{string(key), v})
	}
	return out, true
}

// refLabels is Labels by encoding/json, for a valid object.
func refLabels(in []byte) (map[string]string, bool) {
	top, _ := rawMembers(in)
	var labels map[string]string
	for _, t := range top {
		if t.key != `"metadata"` {
			continue
		}
		md, ok := rawMembers(t.val)
		if !ok {
			return nil, false
		}
		for _, m := range md {
			if m.key != `"labels"` || string(m.val) == "null" {
				continue
			}
			l, ok := stringObject(m.val)
			if !ok {
				return nil, false
			}
			labels = l
		}
	}
	return labels, true
}

// stringObject decodes an object whose values are all strings.
func stringObject(b []byte) (map[string]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	m := map[string]string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		v, err := dec.Token()
		s, isStr := v.(string)
		if err != nil || !isStr {
			return nil, false
		}
		m[k.(string)] = s
	}
	return m, true
}
