package rawjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // the elements' bytes; nil with bad
		bad  bool
	}{
		{in: `[]`, want: []string{}},
		{in: ` [ ] `, want: []string{}},
		{in: `["a",1,true,null,{"k":[1]},[2,3]]`, want: []string{`"a"`, `1`, `true`, `null`, `{"k":[1]}`, `[2,3]`}},
		{in: `[ "x" , 2 ]` + "\n", want: []string{`"x"`, `2`}},
		{in: `["a\"b"]`, want: []string{`"a\"b"`}},
		{in: ``, bad: true},
		{in: `{}`, bad: true},
		{in: `[`, bad: true},
		{in: `["a",]`, bad: true},
		{in: `[,]`, bad: true},
		{in: `["a" "b"]`, bad: true},
		{in: `["a"] x`, bad: true},
		{in: `["a"][]`, bad: true},
		{in: `[01]`, bad: true},
		{in: "[\"\xff\"]", bad: true},
		{in: `[1`, bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			spans, err := Elements([]byte(tc.in), nil)
			if tc.bad {
				if err == nil || !errors.Is(err, ErrMalformed) {
					t.Fatalf("Elements(%q) = %v, %v; want an ErrMalformed error", tc.in, spans, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Elements(%q): %v", tc.in, err)
			}
			got := []string{}
			for _, s := range spans {
				got = append(got, tc.in[s.Start:s.End])
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Elements(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Elements(%q) = %q, want %q", tc.in, got, tc.want)
				}
			}
		})
	}
}

func TestElementsDepthAndSize(t *testing.T) {
	deep := make([]byte, 0, 2*MaxDepth+4)
	for range MaxDepth + 1 {
		deep = append(deep, '[')
	}
	for range MaxDepth + 1 {
		deep = append(deep, ']')
	}
	if _, err := Elements(deep, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an array nested %d levels: %v, want ErrMalformed", MaxDepth+1, err)
	}
	big := make([]byte, MaxSize+1)
	big[0], big[len(big)-1] = '[', ']'
	for i := 1; i < len(big)-1; i++ {
		big[i] = ' '
	}
	if _, err := Elements(big, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an array of %d bytes: %v, want ErrMalformed", len(big), err)
	}
}

// FuzzElements holds Elements to encoding/json: it accepts exactly the
// valid JSON arrays (in valid UTF-8, within MaxDepth), and its spans are
// the arrays' elements.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `["a",1,true,null]`, `[{"a":[1]},[2]]`, `[1,]`, `["\q"]`, `[01]`, `{"a":1}`, "[\"\xff\"]", `["a"] x`, ` [ "x" , 2 ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		spans, err := Elements(in, nil)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Elements error %v is not ErrMalformed", err)
		}
		i := SkipSpace(in, 0)
		valid := json.Valid(in) && utf8.Valid(in) && i < len(in) && in[i] == '[' && depth(in) <= MaxDepth
		if (err == nil) != valid {
			t.Fatalf("Elements(%q) = %v; want ok %v", in, err, valid)
		}
		if !valid {
			return
		}
		var ref []json.RawMessage
		if err := json.Unmarshal(in, &ref); err != nil {
			t.Fatal(err)
		}
		if len(ref) != len(spans) {
			t.Fatalf("Elements(%q): %d spans, encoding/json %d elements", in, len(spans), len(ref))
		}
		for k, s := range spans {
			var a, b any
			if json.Unmarshal(in[s.Start:s.End], &a) != nil || json.Unmarshal(ref[k], &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("Elements(%q): element %d is %q, encoding/json's %q", in, k, in[s.Start:s.End], ref[k])
			}
		}
	})
}
