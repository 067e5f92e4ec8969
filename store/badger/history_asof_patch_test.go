package badger

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestApplyReverse: applyReverse gives rawApplyMergePatch's result byte
// for byte, or fails where it fails: for reverse patches the writer makes
// (mergePatches), for patches that touch members the document lacks, and
// for documents that are not objects. So does applyReverseIn given the
// span of any top-level object value of the document (the record's
// metadata, as its row spans say), and given a span that is not one.
func TestApplyReverse(t *testing.T) {
	same := func(t *testing.T, doc, patch []byte) {
		t.Helper()
		want, werr := rawApplyMergePatch(doc, patch)
		got, err := applyReverse(doc, patch)
		if (werr != nil) != (err != nil) || !bytes.Equal(got, want) {
			t.Fatalf("doc %s patch %s: %s, %v; want %s, %v", doc, patch, got, err, want, werr)
		}
		spans := []rawjson.Span{{Start: 0, End: len(doc)}, {Start: 1, End: 2}, {Start: len(doc), End: len(doc) + 2}}
		if ms, _, err := rawjson.Members(doc, 0, nil); err == nil {
			for _, m := range ms {
				spans = append(spans, rawjson.Span{Start: m.ValueStart, End: m.ValueEnd})
			}
		}
		for _, md := range spans {
			got, err := applyReverseIn(doc, patch, md)
			if (werr != nil) != (err != nil) || !bytes.Equal(got, want) {
				t.Fatalf("doc %s patch %s span %v: %s, %v; want %s, %v", doc, patch, md, got, err, want, werr)
			}
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
		// A known metadata span (applyReverseIn): its rest copied once the
		// patch's members in it are met, or passed over when not patched.
		{"metadata relabel", `{"kind":"Pod","metadata":{"name":"a","labels":{"c":"y","s":"y"},"managedFields":[{"f":{"f:labels":{}}}]},"spec":{"x":[1]}}`, `{"metadata":{"labels":{"c":null}}}`},
		{"metadata last", `{"kind":"Pod","metadata":{"name":"a","labels":{"c":"y"},"uid":"u"}}`, `{"metadata":{"labels":{"c":null}}}`},
		{"metadata rest empty", `{"metadata":{"name":"a","labels":{"c":"y"}},"s":1}`, `{"metadata":{"labels":{"c":"z"}}}`},
		{"metadata rest with a space", `{"metadata":{"labels":{"c":"y"}, "n":1},"s":1}`, `{"metadata":{"labels":{"c":null}}}`},
		{"metadata rest with a space in a string", `{"metadata":{"labels":{"c":"y"},"n":"a b"},"s":1}`, `{"metadata":{"labels":{"c":null}}}`},
		{"top tail with a space", `{"metadata":{"labels":{"c":"y"},"n":1},"s": 1}`, `{"metadata":{"labels":{"c":null}}}`},
		{"metadata duplicate in the rest", `{"metadata":{"labels":{"c":"y"},"labels":{"c":"w"}},"s":1}`, `{"metadata":{"labels":{"c":null}}}`},
		{"metadata all removed", `{"metadata":{"labels":{"c":"y"}},"s":1}`, `{"metadata":{"labels":null}}`},
		{"metadata member added", `{"metadata":{"labels":{"c":"y"},"n":1},"s":1}`, `{"metadata":{"labels":{"c":null},"z":2}}`},
		{"metadata removed", `{"a":1,"metadata":{"labels":{"c":"y"}},"s":1}`, `{"metadata":null}`},
		{"metadata replaced", `{"metadata":{"labels":{"c":"y"}},"s":1}`, `{"metadata":"x"}`},
		{"status past metadata", `{"kind":"Pod","metadata":{"name":"a","managedFields":[{"f":"}"}]},"status":{"phase":"Running"}}`, `{"status":{"phase":"Pending"}}`},
		{"metadata and status", `{"metadata":{"labels":{"c":"y"},"n":1},"spec":{},"status":{"p":"R"}}`, `{"metadata":{"labels":{"c":null}},"status":{"p":"P"}}`},
		{"trailing newline after metadata", "{\"metadata\":{\"labels\":{\"c\":\"y\"},\"n\":1},\"s\":1}\n", `{"metadata":{"labels":{"c":null}}}`},
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
			for _, c := range []struct {
				name     string
				old, cur []byte
			}{
				{"status", benchdata.Pod("c1", i, 1), benchdata.Pod("c1", i, 2)},
				// bench-historyapi's churn: a label added before the others.
				{"relabel", benchdata.Pod("c1", i, 1), bytes.Replace(benchdata.Pod("c1", i, 1), []byte(`"labels":{`), []byte(`"labels":{"a-churned":"yes",`), 1)},
			} {
				_, rev := mergePatches(c.old, c.cur)
				if rev == nil {
					t.Fatalf("pod %d, %s: no reverse patch", i, c.name)
				}
				same(t, c.cur, rev)
				row, err := rawjson.FindRowSpans(c.cur, "")
				if err != nil {
					t.Fatal(err)
				}
				if got, err := applyReverseIn(c.cur, rev, row.Metadata); err != nil || !bytes.Equal(got, c.old) {
					t.Fatalf("pod %d, %s: patched back to %s, %v", i, c.name, got, err)
				}
			}
		}
	})
}

// BenchmarkApplyReverse: a Pod's state before a change, from its state
// after and the reverse patch, by both appliers and by applyReverseIn
// given the metadata's span (as the record's row spans give it): a
// status change (the patch's last member is the Pod's last) and a
// relabel (the patch ends in the metadata: spec and status are copied as
// they are).
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
		row, err := rawjson.FindRowSpans(c.cur, "")
		if err != nil {
			b.Fatal(err)
		}
		withSpan := func(doc, patch []byte) ([]byte, error) { return applyReverseIn(doc, patch, row.Metadata) }
		for _, f := range []struct {
			name  string
			apply func(doc, patch []byte) ([]byte, error)
		}{{"rawApplyMergePatch", rawApplyMergePatch}, {"applyReverse", applyReverse}, {"applyReverseIn", withSpan}} {
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

// TestHasSpaceOrControl: the word-at-a-time look for a byte up to a
// space agrees with a byte-at-a-time one, wherever the byte lies (each
// of the 32-, 8- and 1-byte steps) and whatever the bytes around it
// (ASCII, UTF-8's high bytes).
func TestHasSpaceOrControl(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 3))
	alphabet := []byte("a{}\",:0\x7f\x80\xc3\xa9\xff !\x00\t\n\r\x1f")
	for range 20000 {
		b := make([]byte, rng.IntN(100))
		for i := range b {
			b[i] = alphabet[rng.IntN(8)] // no byte up to a space
			if rng.IntN(len(b)*2+1) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		want := false
		for _, c := range b {
			want = want || c <= ' '
		}
		if got := hasSpaceOrControl(b); got != want {
			t.Fatalf("%q: %v, want %v", b, got, want)
		}
	}
}
