package badger

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestApplyReverse: applyReverse gives rawApplyMergePatch's result byte
// for byte, or fails where it fails: for reverse patches the writer makes
// (mergePatches), for patches that touch members the document lacks, and
// for documents that are not objects.
func TestApplyReverse(t *testing.T) {
	same := func(t *testing.T, doc, patch []byte) {
		t.Helper()
		want, werr := rawApplyMergePatch(doc, patch)
		got, err := applyReverse(doc, patch)
		if (werr != nil) != (err != nil) || !bytes.Equal(got, want) {
			t.Fatalf("doc %s patch %s: %s, %v; want %s, %v", doc, patch, got, err, want, werr)
		}
	}
	cases := []struct{ name, doc, patch string }{
		{"nothing", `{"a":1}`, `{}`},
		{"empty doc", `{}`, `{"a":{"b":1}}`},
		{"replace", `{"a":1,"b":2}`, `{"b":3}`},
		{"remove", `{"a":1,"b":2}`, `{"a":null}`},
		{"remove absent", `{"a":1}`, `{"x":null}`},
		{"nested", `{"m":{"x":{"y":1,"z":2}},"n":"v"}`, `{"m":{"x":{"z":null,"w":[1]}},"n":null}`},
		{"object over scalar", `{"a":3}`, `{"a":{"b":1}}`},
		{"scalar over object", `{"a":{"b":1},"c":2}`, `{"a":3}`},
		{"array", `{"s":{"c":[{"ready":true}]}}`, `{"s":{"c":[{"ready":false}]}}`},
		{"added last", `{"a":1}`, `{"z":{"y":"x"}}`},
		{"strings with braces", `{"a":"{\"}","b":{"c":"]}"}}`, `{"b":{"d":"{"}}`},
		{"spaces", `{ "a" : { "b" : 1 } , "c" : [ 1 , 2 ] }`, `{"a":{"b":2}}`},
		{"not an object", `[1]`, `{"a":1}`},
		{"truncated", `{"a":{"b":1}`, `{"a":{"b":2}}`},
		{"patch not an object", `{"a":1}`, `[1]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { same(t, []byte(tc.doc), []byte(tc.patch)) })
	}
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(48, 2))
		patched := 0
		for range 5000 {
			o := randObject(rng, 3)
			old, _ := json.Marshal(o)
			cur, _ := json.Marshal(mutate(rng, o, 3))
			if _, rev := mergePatches(old, cur); rev != nil {
				same(t, cur, rev)
				patched++
			}
			// Any patch: the other state's members as a patch, whatever
			// the document holds.
			same(t, cur, old)
			same(t, old, cur)
		}
		if patched < 1000 {
			t.Errorf("only %d of 5000 changes had a reverse patch", patched)
		}
	})
	t.Run("pods", func(t *testing.T) {
		for i := range 50 {
			old, cur := benchdata.Pod("c1", i, 1), benchdata.Pod("c1", i, 2)
			_, rev := mergePatches(old, cur)
			if rev == nil {
				t.Fatalf("pod %d: no reverse patch", i)
			}
			same(t, cur, rev)
			if got, err := applyReverse(cur, rev); err != nil || !bytes.Equal(got, old) {
				t.Fatalf("pod %d: patched back to %s, %v", i, got, err)
			}
		}
	})
}

// BenchmarkApplyReverse: a Pod's state before a change, from its state
// after and the reverse patch, by both appliers.
func BenchmarkApplyReverse(b *testing.B) {
	old, cur := benchdata.Pod("c1", 7, 1), benchdata.Pod("c1", 7, 2)
	_, rev := mergePatches(old, cur)
	for _, f := range []struct {
		name  string
		apply func(doc, patch []byte) ([]byte, error)
	}{{"rawApplyMergePatch", rawApplyMergePatch}, {"applyReverse", applyReverse}} {
		b.Run(f.name, func(b *testing.B) {
			for range b.N {
				if _, err := f.apply(cur, rev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
