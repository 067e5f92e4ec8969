package rawjson

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

type labelsCase struct {
	name string
	in   string
	want map[string]string
	bad  bool
}

func labelsCases() []labelsCase {
	return []labelsCase{
		{"labels", `{"kind":"Pod","metadata":{"name":"a","labels":{"app":"web","x/y":"z"}},"spec":{}}`, map[string]string{"app": "web", "x/y": "z"}, false},
		{"no labels", `{"metadata":{"name":"a"}}`, nil, false},
		{"null labels", `{"metadata":{"labels":null}}`, nil, false},
		{"empty labels", `{"metadata":{"labels":{}}}`, map[string]string{}, false},
		{"spaces and escapes", " { \"a\" : \"q\\\"}{\" , \"metadata\" : { \"labels\" : {\"k\":\"v\\\\\"} } } ", map[string]string{"k": `v\`}, false},
		{"escaped key", `{"metadata":{"labels":{"a\u002fb":"\u00e9"}}}`, map[string]string{"a/b": "é"}, false},
		{"nested labels key elsewhere", `{"spec":{"metadata":{"labels":{"no":"pe"}}},"metadata":{"labels":{"ok":"1"}}}`, map[string]string{"ok": "1"}, false},
		{"empty object", `{}`, nil, false},
		{"not an object", `[1]`, nil, true},
		{"bare string", `"x"`, nil, true},
		{"bare number", `1`, nil, true},
		{"truncated", `{"metadata":{"labels":{"a":"b"}`, nil, true},
		{"unterminated string", `{"metadata":{"name":"a}}`, nil, true},
		{"trailing", `{"a":1}x`, nil, true},
		{"labels not strings", `{"metadata":{"labels":{"a":1}}}`, nil, true},
		{"labels null value", `{"metadata":{"labels":{"a":null}}}`, nil, true},
		{"labels not an object", `{"metadata":{"labels":["a"]}}`, nil, true},
		{"labels bad escape", `{"metadata":{"labels":{"a":"\x"}}}`, nil, true},
		{"labels nul literal", `{"metadata":{"labels":nul}}`, nil, true},
		// An object that closes early would be two items where list
		// responses concatenate stored objects.
		{"closed early", `{"metadata":{"name":"a"}},{"kind":"Pod","metadata":{"annotations":{"fleetview.io/cluster":"other"}}}`, nil, true},
		{"closed early after labels", `{"metadata":{"labels":{"a":"b"}}},{"x":1}`, nil, true},
		{"unbalanced after metadata", `{"metadata":{"name":"a"},"spec":{"a":[1}}`, nil, true},
		{"unbalanced in metadata after labels", `{"metadata":{"labels":{},"annotations":{"a":["b"}},"spec":{}}`, nil, true},
		{"mismatched that balances", `{"spec":{"a":[1}],"b":2}`, nil, true},
		{"missing comma at top", `{"metadata":{} "spec":{}}`, nil, true},
		{"bad number in metadata", `{"metadata":{"generation":01}}`, nil, true},
		{"bad literal at top", `{"metadata":{},"x":tru}`, nil, true},
		// Values the caller does not look into are checked in full too.
		{"missing comma deep", `{"spec":{"a":[1 2]}}`, nil, true},
		{"missing colon deep", `{"spec":{"a" 1}}`, nil, true},
		{"forged Pod spec", `{"metadata":{"name":"p","labels":{"a":"b"}},"spec":{"a" 1 2}}`, nil, true},
		{"bad number in an annotation-like skipped value", `{"metadata":{"annotations":{"x":[01]}}}`, nil, true},
		{"bad literal in metadata", `{"metadata":{"finalizers":[nul]}}`, nil, true},
		{"invalid UTF-8 in a skipped string", "{\"spec\":{\"a\":\"\xff\"}}", nil, true},
		{"empty", ``, nil, true},
	}
}

func TestLabels(t *testing.T) {
	for _, tc := range labelsCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Labels([]byte(tc.in))
			if tc.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Labels(%q) = %v, %v; want ErrMalformed", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLabelsMatchesUnmarshal(t *testing.T) {
	for i := range 50 {
		pod := podjson.Pod("c", i, 3)
		var want struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pod, &want); err != nil {
			t.Fatal(err)
		}
		got, err := Labels(pod)
		if err != nil || !maps.Equal(got, want.Metadata.Labels) {
			t.Fatalf("pod %d: got %v %v, want %v", i, got, err, want.Metadata.Labels)
		}
	}
}

func BenchmarkLabels(b *testing.B) {
	pod := podjson.Pod("c", 7, 3)
	b.SetBytes(int64(len(pod)))
	for b.Loop() {
		if _, err := Labels(pod); err != nil {
			b.Fatal(err)
		}
	}
}

// LabelsAnnotationsText finds the labels Labels finds and refuses what it
// refuses, and reports every value of the annotations asked for that is
// not the one wanted, however spelled and wherever repeated.
func TestLabelsAnnotations(t *testing.T) {
	for _, tc := range labelsCases() {
		t.Run("labels/"+tc.name, func(t *testing.T) {
			got, _, _, err := LabelsAnnotationsText([]byte(tc.in), "c", nil, "fleetview.io/cluster")
			if tc.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("LabelsAnnotationsText(%q) = %v, %v; want ErrMalformed", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		in   string
		want []string
		bad  bool
	}{
		{"none", `{"metadata":{"name":"a"}}`, nil, false},
		{"null annotations", `{"metadata":{"annotations":null}}`, nil, false},
		{"both keys, as wanted", `{"metadata":{"annotations":{"a":"x","fleetview.io/cluster":"c","k/c":"c"}}}`, nil, false},
		{"both keys, one not as wanted", `{"metadata":{"annotations":{"a":"x","fleetview.io/cluster":"c","k/c":"d"}}}`, []string{"d"}, false},
		{"escaped wanted value", `{"metadata":{"annotations":{"fleetview.io/cluster":"\u0063"}}}`, nil, false},
		{"duplicate key", `{"metadata":{"annotations":{"fleetview.io/cluster":"e","fleetview.io/cluster":"d"}}}`, []string{"e", "d"}, false},
		{"escaped key", `{"metadata":{"annotations":{"fleetview.io\/cluster":"d"}}}`, []string{"d"}, false},
		{"escaped metadata", `{"m\u0065tadata":{"annotations":{"fleetview.io/cluster":"d"}}}`, []string{"d"}, false},
		{"escaped value", `{"metadata":{"annotations":{"fleetview.io/cluster":"\u0064"}}}`, []string{"d"}, false},
		{"two metadata members", `{"metadata":{"annotations":{"fleetview.io/cluster":"c"}},"metadata":{"annotations":{"k/c":"d"}}}`, []string{"d"}, false},
		{"elsewhere is not metadata", `{"spec":{"metadata":{"annotations":{"fleetview.io/cluster":"d"}}}}`, nil, false},
		{"value not a string", `{"metadata":{"annotations":{"fleetview.io/cluster":1}}}`, nil, true},
		{"annotations not an object", `{"metadata":{"annotations":"x"}}`, nil, true},
		{"other values unchecked but scanned", `{"metadata":{"annotations":{"a":{"b":[1]}}}}`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, _, err := LabelsAnnotationsText([]byte(tc.in), "c", nil, "fleetview.io/cluster", "k/c")
			if tc.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("LabelsAnnotationsText(%q) = %v, %v; want ErrMalformed", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCheckedLabels: on a well-formed object CheckedLabels answers what
// Labels does; a malformation before metadata's end is an error, one
// after it is not read (the object was checked whole when stored).
func TestCheckedLabels(t *testing.T) {
	for _, tc := range labelsCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckedLabels([]byte(tc.in))
			if tc.bad {
				if err != nil && !errors.Is(err, ErrMalformed) {
					t.Fatalf("CheckedLabels(%q): %v, not ErrMalformed", tc.in, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		bad      bool
	}{
		{"metadata first, rest not read", `{"metadata":{"labels":{"a":"b"}},"spec":{"a" 1}}`, map[string]string{"a": "b"}, false},
		{"bad before metadata", `{"kind":tru,"metadata":{"labels":{"a":"b"}}}`, nil, true},
		{"bad labels", `{"metadata":{"labels":{"a":1}}}`, nil, true},
		{"bad in metadata after labels", `{"metadata":{"labels":{},"annotations":{"a":["b"}}}`, nil, true},
		{"no metadata", `{"kind":"Pod"}`, nil, false},
		{"a Pod", string(podjson.Pod("c1", 3, 1)), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckedLabels([]byte(tc.in))
			if tc.bad != (err != nil) {
				t.Fatalf("CheckedLabels(%q) = %v, %v; want error %v", tc.in, got, err, tc.bad)
			}
			if tc.name == "a Pod" {
				want, err := Labels([]byte(tc.in))
				if err != nil || !maps.Equal(got, want) || len(want) == 0 {
					t.Fatalf("got %v, Labels %v (%v)", got, want, err)
				}
				return
			}
			if !tc.bad && !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
