package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

// FuzzScan checks the scanner against encoding/json. For any input, none
// of Check, ObjectMembers and Labels panics, and:
//
//  1. Check accepts exactly when encoding/json's json.Valid does, the input
//     is valid UTF-8 (json.Valid lets invalid bytes in strings through,
//     and decoders replace them), its value is an object, and it nests no
//     deeper than MaxDepth (inputs here are far below MaxSize): the whole
//     grammar, everywhere, including inside the values a caller skips.
//  2. ObjectMembers accepts exactly when Check does, with member spans
//     that hold json.Valid values; Labels accepts only when Check does;
//     every error wraps ErrMalformed.
//  3. For an input Check accepts, Labels equals what encoding/json decodes
//     from the last non-null metadata.labels (keys matched as written, as
//     the scanner does), and fails exactly when some metadata is not an
//     object or some labels are not null or an object of strings.
//  4. PathValues (of a and of a.b, through arrays) accepts exactly when
//     Check does, and every value it finds is json.Valid.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"metadata":{"labels":{"a":"b"}}}`, `{"a":[1,{"b":null}],"c":"\"}"}`,
		`{"metadata":{"labels":null},"metadata":{"labels":{"k":"v\\"}}}`, `{"a":1}x`, `[1]`, `{"a":[1}]}`,
		`{"":10[]}`, // a nested value right after a number: invalid
		`{"metadata":{"name":"p"},"spec":{"a" 1 2}}`, `{"a":[1,]}`, `{"a":{"b":1 "c":2}}`, `{"a":[01]}`,
		"{\"a\":[\"\x01\"]}", "{\"a\":{\"b\":\"\xff\"}}", `{"a":["\u12"]}`, `{"a":["\q"]}`,
		`{"a":[true,false,null,-0.5e+3,"\u00e9\n"]}`, "{\"a\":[\"caf\xc3\xa9\"]}",
	} {
		f.Add([]byte(s))
	}
	f.Add(podjson.Pod("c", 1, 3))
	f.Fuzz(func(t *testing.T, in []byte) {
		err := Check(in)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Check error %v is not ErrMalformed", err)
		}
		valid := json.Valid(in) && utf8.Valid(in) && isObject(in) && depth(in) <= MaxDepth
		if (err == nil) != valid {
			t.Fatalf("Check(%q) = %v; json.Valid %v, utf8.Valid %v, depth %d: want ok %v", in, err, json.Valid(in), utf8.Valid(in), depth(in), valid)
		}
		ms, merr := ObjectMembers(in, nil)
		if (merr == nil) != (err == nil) {
			t.Fatalf("ObjectMembers(%q) = %v, Check %v", in, merr, err)
		}
		for _, path := range [][]string{{"a"}, {"a", "b"}} {
			vals, perr := PathValues(in, path, nil)
			if (perr == nil) != (err == nil) || (perr != nil && !errors.Is(perr, ErrMalformed)) {
				t.Fatalf("PathValues(%q, %v) = %v, Check %v", in, path, perr, err)
			}
			for _, v := range vals {
				if !json.Valid(v) {
					t.Fatalf("PathValues(%q, %v): value %q is not JSON", in, path, v)
				}
			}
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
		want, ok := refLabels(in)
		if ok != (lerr == nil) || !maps.Equal(labels, want) || (labels == nil) != (want == nil) {
			t.Fatalf("Labels(%q) = %v, %v; encoding/json: %v, ok %v", in, labels, lerr, want, ok)
		}
	})
}

// depth is how deeply the brackets of b nest outside its strings (strings
// tokenised the plain way: a backslash takes the next byte along).
func depth(b []byte) int {
	d, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if d++; d > deepest {
				deepest = d
			}
		case '}', ']':
			d--
		}
	}
	return deepest
}

func isObject(b []byte) bool {
	i := SkipSpace(b, 0)
	return i < len(b) && b[i] == '{'
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
