package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
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
		{"control byte in a string", "{\"a\":\"\x01\"}", false},
		{"nested: leading zero", `{"a":[01]}`, false},
		{"nested: plus sign", `{"a":[+1]}`, false},
		{"nested: literal cut short", `{"a":[tru]}`, false},
		{"nested: unknown word", `{"a":{"b":x}}`, false},
		{"nested: the spec of a forged Pod", `{"metadata":{"name":"p"},"spec":{"a" 1 2}}`, false},
		{"nested: missing colon", `{"a":{"b" 1}}`, false},
		{"nested: key not a string", `{"a":{b:1}}`, false},
		{"nested: missing value", `{"a":{"b":}}`, false},
		{"nested: value after a value", `{"a":[1 2]}`, false},
		{"nested: closed early", `{"a":{"b":1},"c":{}},{"d":1}`, false},
		{"nested: control byte in a string", "{\"a\":[\"\x1f\"]}", false},
		{"nested: raw new line in a key", "{\"a\":{\"b\nc\":1}}", false},
		{"nested: bad escape", `{"a":["\x"]}`, false},
		{"nested: short unicode escape", `{"a":["\u12"]}`, false},
		{"nested: unicode escape not hex", `{"a":["\u12g4"]}`, false},
		{"nested: invalid UTF-8", "{\"a\":[\"\xff\"]}", false},
		{"nested: truncated UTF-8", "{\"a\":[\"\xc3\"]}", false},
		{"nested: UTF-8 surrogate", "{\"a\":[\"\xed\xa0\x80\"]}", false},
		{"nested: overlong UTF-8", "{\"a\":[\"\xc0\xaf\"]}", false},
		{"invalid UTF-8 in a key", "{\"\xfe\":1}", false},
		{"nested: every escape", `{"a":["\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"]}`, true},
		{"nested: UTF-8", "{\"a\":{\"\xc3\xa9\":[\"\xe2\x82\xac\xf0\x9f\x98\x80\"]}}", true},
		{"nested: long plain string", `{"a":["` + strings.Repeat("abcdefgh", 9) + `"]}`, true},
		{"nested: every number", `{"a":[0,-0,1.5,-2e10,3E-2,4e+0,12345678901234567890]}`, true},
		{"nested: white space everywhere", "{\"a\": [ 1 , { \"b\" : null } ,\t[ ] ,\r\n{ } ] }", true},
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
		{"nested: trailing comma in array", `{"a":[1,]}`, false},
		{"nested: trailing comma in object", `{"a":{"b":1,}}`, false},
		{"nested: leading comma", `{"a":[,1]}`, false},
		{"nested: missing comma in object", `{"a":{"b":1 "c":2}}`, false},
		{"nested: colon in an array", `{"a":[1:2]}`, false},
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

// TestBounds: MaxDepth counts the top-level object as level 1 and holds
// wherever the nesting is, in a value a caller skips or in metadata.
// annotations, which Labels and LabelsAnnotationsText read; MaxSize bounds the
// document.
func TestBounds(t *testing.T) {
	nest := func(prefix string, levels int, suffix string) []byte {
		b := []byte(prefix)
		b = append(b, strings.Repeat("[", levels)...)
		b = append(b, strings.Repeat("]", levels)...)
		return append(b, suffix...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"past a word of bits", nest(`{"a":`, 200, `}`), true},
		{"at MaxDepth", nest(`{"a":`, MaxDepth-1, `}`), true},
		{"past MaxDepth", nest(`{"a":`, MaxDepth, `}`), false},
		{"at MaxDepth in annotations", nest(`{"metadata":{"annotations":{"x":`, MaxDepth-3, `}}}`), true},
		{"past MaxDepth in annotations", nest(`{"metadata":{"annotations":{"x":`, MaxDepth-2, `}}}`), false},
		{"past MaxDepth in metadata", nest(`{"metadata":{"x":`, MaxDepth-1, `}}`), false},
		{"at MaxSize", append(append([]byte(`{"a":"`), bytes.Repeat([]byte("x"), MaxSize-8)...), `"}`...), true},
		{"past MaxSize", append(append([]byte(`{"a":"`), bytes.Repeat([]byte("x"), MaxSize-7)...), `"}`...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check = %v, not ErrMalformed", err)
			}
			if _, err := Labels(tc.in); (err == nil) != tc.ok {
				t.Fatalf("Labels = %v, want ok %v", err, tc.ok)
			}
			if _, _, _, err := LabelsAnnotationsText(tc.in, "c", nil, "fleetview.io/cluster"); (err == nil) != tc.ok {
				t.Fatalf("LabelsAnnotationsText = %v, want ok %v", err, tc.ok)
			}
			if _, err := ObjectMembers(tc.in, nil); (err == nil) != tc.ok {
				t.Fatalf("ObjectMembers = %v, want ok %v", err, tc.ok)
			}
			if len(tc.in) < MaxSize && json.Valid(tc.in) != true {
				t.Fatal("the case is not valid JSON: it tests nothing")
			}
		})
	}
}

// BenchmarkCheck compares the scanner with encoding/json's json.Valid on
// a realistic Pod: the materializer checks every object it applies.
func BenchmarkCheck(b *testing.B) {
	pod := podjson.Pod("c", 7, 3)
	b.Run("rawjson.Check", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if err := Check(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(pod) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid+utf8.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(pod) || !utf8.Valid(pod) {
				b.Fatal("invalid")
			}
		}
	})
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
