package rawjson

import (
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

func TestFindRowSpans(t *testing.T) {
	const ann = "fleetview.io/cluster"
	pod := string(podjson.Pod("member1", 3, 1))
	cases := []struct {
		name, obj                                 string
		metadata, nameV, created, annotation, err string
	}{
		{name: "a stored Pod", obj: pod, metadata: pod[len(`{"apiVersion":"v1","kind":"Pod","metadata":`):strings.Index(pod, `,"spec":`)],
			nameV: `"` + podjson.PodName(3) + `"`, created: `"2026-11-01T10:03:00Z"`, annotation: `"member1"`},
		{name: "metadata first, escapes kept", obj: `{"metadata":{"name":"a\"b","annotations":{"x":"}","fleetview.io/cluster":"m\u0031"}},"kind":"Pod"}`,
			metadata: `{"name":"a\"b","annotations":{"x":"}","fleetview.io/cluster":"m\u0031"}}`, nameV: `"a\"b"`, annotation: `"m\u0031"`},
		{name: "nulls are absent", obj: `{"metadata":{"name":"a","creationTimestamp":null,"annotations":null}}`, metadata: `{"name":"a","creationTimestamp":null,"annotations":null}`, nameV: `"a"`},
		{name: "no metadata", obj: `{"kind":"Pod"}`, err: "object without metadata"},
		{name: "metadata not an object", obj: `{"metadata":[]}`, err: "object without metadata"},
		{name: "name not a string", obj: `{"metadata":{"name":7}}`, err: "metadata.name is 7, not a string"},
		{name: "annotations not an object", obj: `{"metadata":{"annotations":"x"}}`, err: "metadata.annotations is not an object"},
		{name: "broken before metadata", obj: `{"kind" "Pod","metadata":{}}`, err: "':' expected"},
	}
	val := func(obj string, s Span) string {
		if s == (Span{}) {
			return ""
		}
		return obj[s.Start:s.End]
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := FindRowSpans([]byte(c.obj), ann)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []struct{ what, got, want string }{{"metadata", val(c.obj, r.Metadata), c.metadata},
				{"name", val(c.obj, r.Name), c.nameV}, {"creationTimestamp", val(c.obj, r.Created), c.created}, {"annotation", val(c.obj, r.Annotation), c.annotation}} {
				if g.got != g.want {
					t.Errorf("%s %q, want %q", g.what, g.got, g.want)
				}
			}
			if !r.Valid([]byte(c.obj)) {
				t.Error("spans found are not Valid")
			}
			if back := RowSpansAt(r.Offsets(nil)); back != r {
				t.Errorf("RowSpansAt(Offsets) = %+v, want %+v", back, r)
			}
		})
	}
}

// TestRowSpansValid: spans stored beside an object are trusted only when
// they fit it.
func TestRowSpansValid(t *testing.T) {
	obj := []byte(`{"metadata":{"name":"a"},"spec":{}}`)
	good, err := FindRowSpans(obj, "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    RowSpans
		want bool
	}{
		{"found", good, true},
		{"none", RowSpans{}, false},
		{"past the end", RowSpans{Metadata: Span{12, 400}}, false},
		{"metadata not an object", RowSpans{Metadata: Span{1, 11}}, false},
		{"name outside the metadata", RowSpans{Metadata: good.Metadata, Name: Span{1, 11}}, false},
		{"name not a string", RowSpans{Metadata: good.Metadata, Name: Span{12, 14}}, false},
		{"negative", RowSpans{Metadata: Span{-1, 2}}, false},
	} {
		if got := c.r.Valid(obj); got != c.want {
			t.Errorf("%s: Valid %v, want %v", c.name, got, c.want)
		}
	}
}
