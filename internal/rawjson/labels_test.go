package rawjson

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/fleetview/fleetview/internal/benchdata"
)

func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string]string
		bad  bool
	}{
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
		// Inside values the caller does not look into, only brackets and
		// strings are checked (see SkipValue).
		{"missing comma deep not checked", `{"spec":{"a":[1 2]}}`, nil, false},
		{"missing colon deep not checked", `{"spec":{"a" 1}}`, nil, false},
		{"empty", ``, nil, true},
	} {
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
		pod := benchdata.Pod("c", i, 3)
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
	pod := benchdata.Pod("c", 7, 3)
	b.SetBytes(int64(len(pod)))
	for b.Loop() {
		if _, err := Labels(pod); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	pod := benchdata.Pod("c", 7, 3)
	b.SetBytes(int64(len(pod)))
	for b.Loop() {
		if err := Check(pod); err != nil {
			b.Fatal(err)
		}
	}
}
