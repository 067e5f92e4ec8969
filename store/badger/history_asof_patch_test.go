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
		// The tail after the patch's last member copied as it is
		// (compactTail), or walked when a walk would drop a byte of it.
		{"tail copied", `{"m":{"r":"1","l":{"a":"b"}},"s":{"x":[1,{"y":"z"}]},"t":"u"}`, `{"m":{"r":"2"}}`},
		{"tail after removals", `{"a":1,"b":2,"c":{"d":3}}`, `{"a":null,"b":null}`},
		{"everything removed", `{"a":1}`, `{"a":null}`},
		{"tail empty", `{"a":1,"b":2}`, `{"b":3}`},
		{"trailing newline", "{\"a\":1,\"b\":{\"c\":2}}\n", `{"a":3}`},
		{"space in a tail string", `{"a":1,"b":"x y","c":2}`, `{"a":3}`},
		{"space after the value", `{"a":1 ,"b":2}`, `{"a":3}`},
		{"space before the brace", `{"a":1,"b":2 }`, `{"a":3}`},
		{"tab in the tail", "{\"a\":1,\t\"b\":2}", `{"a":3}`},
		{"duplicate in the tail", `{"a":1,"b":2,"a":4}`, `{"a":3}`},
		{"patch adds after meeting", `{"a":1,"b":2}`, `{"a":3,"z":4}`},
		{"unicode in the tail", `{"a":1,"b":"é✓","c":[true,null]}`, `{"a":{"x":1}}`},
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
		// mutate walks maps, so the changes differ from run to run: 996
		// to 1,128 of them kept a reverse patch over 31 runs.
		if patched < 800 {
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
// after and the reverse patch, by both appliers: a status change (the
// patch's last member is the Pod's last) and a relabel (the patch ends
// in the metadata: spec and status are copied as they are).
func BenchmarkApplyReverse(b *testing.B) {
	relabeled := func(pod []byte) []byte {
		pod = bytes.Replace(pod, []byte(`"resourceVersion":"1"`), []byte(`"resourceVersion":"2"`), 1)
		return bytes.Replace(pod, []byte(`"shard":"s7"`), []byte(`"shard":"s7","churned":"yes"`), 1)
	}
	for _, c := range []struct {
		name     string
		old, cur []byte
	}{
		{"status", benchdata.Pod("c1", 7, 1), benchdata.Pod("c1", 7, 2)},
		{"relabel", benchdata.Pod("c1", 7, 1), relabeled(benchdata.Pod("c1", 7, 1))},
	} {
		_, rev := mergePatches(c.old, c.cur)
		if rev == nil {
			b.Fatalf("%s: no reverse patch", c.name)
		}
		for _, f := range []struct {
			name  string
			apply func(doc, patch []byte) ([]byte, error)
		}{{"rawApplyMergePatch", rawApplyMergePatch}, {"applyReverse", applyReverse}} {
			b.Run(c.name+"/"+f.name, func(b *testing.B) {
				for range b.N {
					if got, err := f.apply(c.cur, rev); err != nil || !bytes.Equal(got, c.old) {
						b.Fatalf("%s, %v", got, err)
					}
				}
			})
		}
	}
}
