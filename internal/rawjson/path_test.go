package rawjson

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestPathValues(t *testing.T) {
	obj := `{"a":{"b":"x","n":1.5e3,"t":true,"z":null,"o":{"k":[]}},
		"l":[{"k":"1"},{"j":2},{"k":[3,[4]]},5],"e\u0078":"esc","a":{"b":"dup"}}`
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"a.b", []string{`"x"`, `"dup"`}},
		{"a.n", []string{`1.5e3`}},
		{"a.t", []string{`true`}},
		{"a.z", []string{`null`}},
		{"a.o", []string{`{"k":[]}`}},
		{"a.o.k", nil},
		{"a.b.c", nil},
		{"missing", nil},
		{"l.k", []string{`"1"`, `3`, `4`}},
		{"l", []string{`{"k":"1"}`, `{"j":2}`, `{"k":[3,[4]]}`, `5`}},
		{"ex", []string{`"esc"`}},
	} {
		got, err := PathValues([]byte(obj), strings.Split(tc.path, "."), nil)
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		var s []string
		for _, v := range got {
			s = append(s, string(v))
		}
		if !slices.Equal(s, tc.want) {
			t.Errorf("%s = %q, want %q", tc.path, s, tc.want)
		}
	}
}

func TestPathValuesMalformed(t *testing.T) {
	deep := `{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`
	for _, obj := range []string{``, `[]`, `"x"`, `{"a":}`, `{"a":[1,]}`, `{"a":1} {}`, `{"a":[1 2]}`, `{"b":"\x01"}`, deep} {
		if _, err := PathValues([]byte(obj), []string{"a"}, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("PathValues(%.40q) = %v: want ErrMalformed", obj, err)
		}
	}
}
