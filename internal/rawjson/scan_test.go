package rawjson

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"empty object", `{}`, true},
		{"white space around", " \t\n{ } \r\n", true},
		{"every kind of value", `{"s":"x\"y\\","n":-1.5e+3,"z":0,"t":true,"f":false,"u":null,"a":[],"o":{},"deep":[[{"a":[1,{"b":null}]}]]}`, true},
		{"brackets inside strings", `{"a":"}{][","b":["]"]}`, true},
		{"control bytes in strings are not checked", "{\"a\":\"\x01\"}", true},
		{"nested: numbers and literals not checked", `{"a":[01,+1,tru,x]}`, true},
		{"nested: mismatched brackets", `{"a":{"b":[}]}`, false},
		{"nested: unterminated string", `{"a":{"b":"}}`, false},
		{"empty", ``, false},
		{"spaces only", `  `, false},
		{"bare string", `"x"`, false},
		{"bare number", `1`, false},
		{"bare literal", `null`, false},
		{"array", `[]`, false},
		{"unterminated object", `{"a":1`, false},
		{"unterminated string", `{"a":"b}`, false},
		{"unterminated key", `{"a`, false},
		{"escaped closing quote", `{"a":"b\"}`, false},
		{"trailing data", `{}x`, false},
		{"second object", `{},{}`, false},
		{"mismatched brackets", `{"a":[}`, false},
		{"mismatched that balance", `{"a":[1}]}`, false},
		{"extra closer", `{"a":1}}`, false},
		{"key not a string", `{a:1}`, false},
		{"missing colon", `{"a" 1}`, false},
		{"missing value", `{"a":}`, false},
		{"trailing comma in object", `{"a":1,}`, false},
		{"nested: trailing comma in array not checked", `{"a":[1,]}`, true},
		{"nested: missing comma in array not checked", `{"a":[1 2]}`, true},
		{"nested: missing comma in object not checked", `{"a":{"b":1 "c":2}}`, true},
		{"leading zero", `{"a":01}`, false},
		{"plus sign", `{"a":+1}`, false},
		{"bare minus", `{"a":-}`, false},
		{"dot without digits", `{"a":1.}`, false},
		{"exponent without digits", `{"a":1e}`, false},
		{"literal cut short", `{"a":tru}`, false},
		{"literal run on", `{"a":truex}`, false},
		{"unknown word", `{"a":nope}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.in))
			if tc.ok != (err == nil) {
				t.Fatalf("Check(%q) = %v, want ok %v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check(%q) = %v, not ErrMalformed", tc.in, err)
			}
			if _, merr := ObjectMembers([]byte(tc.in), nil); (merr == nil) != (err == nil) {
				t.Fatalf("ObjectMembers(%q) = %v, Check %v", tc.in, merr, err)
			}
		})
	}
}

func TestDeepNesting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		depth int // arrays inside the top-level object's one member
		ok    bool
	}{
		{"past a word of bits", 200, true},
		{"at encoding/json's limit", maxDepth, true},
		{"past it", maxDepth + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(`{"a":`)
			for range tc.depth - 1 {
				b = append(b, '[')
			}
			for range tc.depth - 1 {
				b = append(b, ']')
			}
			b = append(b, '}')
			if err := Check(b); (err == nil) != tc.ok {
				t.Fatalf("Check at depth %d = %v, want ok %v", tc.depth, err, tc.ok)
			}
			if json.Valid(b) != tc.ok {
				t.Fatalf("json.Valid at depth %d = %v: the limit is not encoding/json's", tc.depth, !tc.ok)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	in := []byte(` { "a" : 1 , "b\"c":{"x":[1,2]},"d":"e" } `)
	got, err := ObjectMembers(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ key, member, value string }{
		{"a", `"a" : 1`, `1`},
		{`b\"c`, `"b\"c":{"x":[1,2]}`, `{"x":[1,2]}`},
		{"d", `"d":"e"`, `"e"`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d members, want %d", len(got), len(want))
	}
	for i, w := range want {
		m := got[i]
		if string(m.Key) != w.key || string(in[m.Start:m.End]) != w.member || string(in[m.ValueStart:m.ValueEnd]) != w.value {
			t.Errorf("member %d = %q %q %q, want %q %q %q", i, m.Key, in[m.Start:m.End], in[m.ValueStart:m.ValueEnd], w.key, w.member, w.value)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`"plain"`, "plain", true},
		{`"we\"ird"`, `we"ird`, true},
		{`"back\\\\"`, `back\\`, true},
		{`"\u00e9"`, "é", true},
		{`null`, "", true},
		{`""`, "", true},
		{`1`, "", false},
		{`"\x"`, "", false},
		{`{}`, "", false},
	} {
		got, err := String([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("String(%s) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("String(%s) = %v, not ErrMalformed", tc.in, err)
		}
	}
}
