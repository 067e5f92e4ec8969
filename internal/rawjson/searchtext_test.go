package rawjson

import (
	"errors"
	"maps"
	"testing"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

// TestLabelsAnnotationsText: the label and annotation fields a search
// matches, lower-cased, each ended by a 0 byte, in the object's order;
// the cluster's annotations are left out, the labels are what Labels
// returns and the other values those of the annotations asked for.
func TestLabelsAnnotationsText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // the fields
		others   []string
		bad      bool
	}{
		{"fields", `{"kind":"Pod","metadata":{"name":"Web-1","namespace":"Team","labels":{"App":"WEB","tier":"x"},"annotations":{"fleetview.io/cluster":"c","Note":"Hello"}},"spec":{"labels":{"not":"meta"}}}`,
			[]string{"app", "web", "tier", "x", "note", "hello"}, nil, false},
		{"escapes and non-ASCII", `{"metadata":{"labels":{"k":"caf\u00c9"},"annotations":{"k\"q":"\u212Aube ÉTÉ"}}}`,
			[]string{"k", "café", `k"q`, "kube été"}, nil, false}, // the Kelvin sign lowers to k
		{"non-string annotation values: the key alone", `{"metadata":{"labels":null,"annotations":{"n":5,"o":{"a":"b"},"s":"v"}}}`,
			[]string{"n", "o", "s", "v"}, nil, false},
		{"another cluster's annotation: an other value, not text", `{"metadata":{"annotations":{"fleetview.io/cluster":"d","a":"B"}}}`,
			[]string{"a", "b"}, []string{"d"}, false},
		{"no metadata", `{"kind":"Pod","spec":{}}`, nil, nil, false},
		{"broken", `{"metadata":{"labels":{"a":"b"`, nil, nil, true},
		{"broken escape", `{"metadata":{"annotations":{"a":"\u12"}}}`, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels, others, got, err := LabelsAnnotationsText([]byte(tc.in), "c", nil, "fleetview.io/cluster")
			if tc.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("LabelsAnnotationsText(%q) = %q, %v; want ErrMalformed", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			for _, f := range tc.want {
				want += f + "\x00"
			}
			if string(got) != want {
				t.Fatalf("text of %q\n got %q\nwant %q", tc.in, got, want)
			}
			l, err := Labels([]byte(tc.in))
			if err != nil || !maps.Equal(l, labels) || len(others) != len(tc.others) {
				t.Fatalf("labels %v and others %v; Labels says %v, %v; want others %v", labels, others, l, err, tc.others)
			}
		})
	}
}

func BenchmarkLabelsAnnotationsText(b *testing.B) {
	pod := podjson.Pod("c1", 1, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := LabelsAnnotationsText(pod, "c1", nil, "fleetview.io/cluster", "resource.karmada.io/cached-from-cluster"); err != nil {
			b.Fatal(err)
		}
	}
}
