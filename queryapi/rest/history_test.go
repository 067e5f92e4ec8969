package rest

import (
	"encoding/json"
	"testing"
)

// TestAppendLabels: an entry's labels are written byte for byte as
// encoding/json writes them, "{}" for none.
func TestAppendLabels(t *testing.T) {
	cases := []struct {
		name   string
		labels map[string]string
	}{
		{"none", nil},
		{"empty", map[string]string{}},
		{"kubernetes labels, sorted", map[string]string{"app": "web", "rev": "7", "app.kubernetes.io/name": "shop-api_1", "a": ""}},
		{"HTML characters escaped", map[string]string{"a": "<b>&"}},
		{"quote and backslash", map[string]string{`k"`: `v\`}},
		{"control and non-ASCII", map[string]string{"a": "tab\there", "é": "\u2028"}},
		{"many", map[string]string{"k01": "1", "k02": "2", "k03": "3", "k04": "4", "k05": "5", "k06": "6", "k07": "7", "k08": "8", "k09": "9",
			"k10": "10", "k11": "11", "k12": "12", "k13": "13", "k14": "14", "k15": "15", "k16": "16", "k17": "17"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := "{}"
			if tc.labels != nil {
				b, err := json.Marshal(tc.labels)
				if err != nil {
					t.Fatal(err)
				}
				want = string(b)
			}
			if got := string(appendLabels([]byte("x"), tc.labels)); got != "x"+want {
				t.Errorf("got %s, want x%s", got, want)
			}
		})
	}
}
