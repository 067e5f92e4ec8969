package materializer

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// The scanner's own cases are in internal/rawjson; these check what the
// materializer adds: its error, which the dead-letter reason carries.
func TestObjectMetaLabels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string // substring of the error; "" for none
	}{
		{"labels", `{"kind":"Pod","metadata":{"name":"a","labels":{"app":"web","x/y":"z"}},"spec":{}}`, map[string]string{"app": "web", "x/y": "z"}, ""},
		{"no labels", `{"metadata":{"name":"a"}}`, nil, ""},
		{"trailing", `{"a":1}x`, nil, "malformed JSON object: trailing data after the object"},
		{"truncated", `{`, nil, "malformed JSON object"},
		{"labels not strings", `{"metadata":{"labels":{"a":1}}}`, nil, "metadata.labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := LabelsAndSearchText([]byte(tc.in), "c1")
			if tc.wantErr != "" {
				if !errors.Is(err, errBadJSON) || !errors.Is(err, rawjson.ErrMalformed) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LabelsAndSearchText(%q) = %v, want errBadJSON and ErrMalformed with %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkLabelsAndSearchText: the labels, the whole-grammar check, the cluster
// annotation check and the search text the fetching stage takes.
func BenchmarkLabelsAndSearchText(b *testing.B) {
	pod := benchdata.Pod("c1", 7, 3)
	b.SetBytes(int64(len(pod)))
	for b.Loop() {
		if _, _, err := LabelsAndSearchText(pod, "c1"); err != nil {
			b.Fatal(err)
		}
	}
}
