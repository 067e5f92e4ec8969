package main

import "testing"

// TestParsePage: the answer's entries are counted and its continue token
// read in one checking pass; malformed answers are errors.
func TestParsePage(t *testing.T) {
	cases := []struct {
		name, body, member string
		items              int
		cont               string
		bad                bool
	}{
		{"revisions", `{"revisions":[{"a":[1,{"b":"}"}]},{}, 3],"continue":""}`, "revisions", 3, "", false},
		{"empty, white space", " { \"items\" : [ ] , \"continue\" : \"t\\\"1\" } ", "items", 0, `t"1`, false},
		{"list with metadata", `{"metadata":{"continue":"x"},"items":[{"kind":"Pod"}],"continue":"c"}`, "items", 1, "c", false},
		{"member missing", `{"items":[]}`, "revisions", 0, "", true},
		{"not an array", `{"items":{}}`, "items", 0, "", true},
		{"bad element", `{"items":[{"a":01}]}`, "items", 0, "", true},
		{"trailing comma", `{"items":[1,]}`, "items", 0, "", true},
		{"bad elsewhere", `{"items":[],"x":[tru]}`, "items", 0, "", true},
		{"trailing data", `{"items":[]}x`, "items", 0, "", true},
		{"unterminated", `{"items":[1`, "items", 0, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, cont, err := parsePage([]byte(tc.body), tc.member)
			if tc.bad {
				if err == nil {
					t.Fatalf("accepted: %d %q", n, cont)
				}
				return
			}
			if err != nil || n != tc.items || cont != tc.cont {
				t.Fatalf("got %d %q %v, want %d %q", n, cont, err, tc.items, tc.cont)
			}
		})
	}
}
