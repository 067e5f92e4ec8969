package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// oneByOne is the reference applyReverseChain keeps to: each patch
// applied in turn by applyReverse (itself rawApplyMergePatch byte for
// byte: TestApplyReverse).
func oneByOne(doc []byte, patches [][]byte) ([]byte, error) {
	for _, p := range patches {
		var err error
		if doc, err = applyReverse(doc, p); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// sameAsOneByOne fails when applyReverseChain's answer for doc and
// patches differs from oneByOne's, when that succeeds, byte for byte;
// with no span known, with the span of each of doc's top-level values
// (the metadata's, as a record's row spans give it) and with spans that
// are none of them. A chain
// oneByOne refuses is not compared: only valid JSON is stored.
func sameAsOneByOne(t testing.TB, doc []byte, patches [][]byte) {
	t.Helper()
	want, err := oneByOne(doc, patches)
	if err != nil {
		return
	}
	// Spans that are no top-level value too: refused, as applyReverseIn
	// refuses them.
	spans := []rawjson.Span{{}, {Start: 0, End: len(doc)}, {Start: 1, End: 2}, {Start: len(doc), End: len(doc) + 2}}
	if ms, _, err := rawjson.Members(doc, 0, nil); err == nil {
		for _, m := range ms {
			spans = append(spans, rawjson.Span{Start: m.ValueStart, End: m.ValueEnd})
		}
	}
	for _, md := range spans {
		got, err := applyReverseChain(doc, patches, md)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("doc %s patches %s span %v:\n got %s, %v\nwant %s", doc, patches, md, got, err, want)
		}
	}
}

// TestApplyReverseChain: the patches applied in one walk give the bytes
// they give applied one by one: chosen cases (a member removed and added
// back, set then merged into, merged into then set, added by one patch
// and changed by a later one, duplicate keys, white space, the tail
// copied), random chains of random patches over random documents, and
// the reverse patches of a Pod's 128 relabels and status changes.
func TestApplyReverseChain(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		patches []string
	}{
		{"none", `{"a":1}`, nil},
		{"one", `{"a":1}`, []string{`{"a":2}`}},
		{"last value wins", `{"a":1,"b":2}`, []string{`{"a":2}`, `{"a":3}`, `{"b":4}`}},
		{"removed then added back: last", `{"a":1,"b":2}`, []string{`{"a":null}`, `{"a":5}`}},
		{"added back then changed", `{"a":1,"b":2,"c":3}`, []string{`{"a":null}`, `{"a":{"x":1}}`, `{"b":null,"a":{"y":2}}`, `{"b":7}`}},
		{"added then removed", `{"a":1}`, []string{`{"z":1}`, `{"y":2}`, `{"z":null}`}},
		{"added, removed, added again", `{"a":1}`, []string{`{"z":1,"y":2}`, `{"z":null}`, `{"z":3}`}},
		{"set then merged into", `{"a":1}`, []string{`{"a":{"b":1,"c":2}}`, `{"a":{"c":null,"d":3}}`}},
		{"merged into then set", `{"a":{"b":1}}`, []string{`{"a":{"b":2}}`, `{"a":"s"}`, `{"a":{"c":1}}`}},
		{"merged into twice", `{"m":{"l":{"a":"x","b":"y"},"r":"1"},"s":{}}`, []string{`{"m":{"l":{"a":"x1"},"r":"2"}}`, `{"m":{"l":{"a":"x2","c":"z"},"r":"3"}}`, `{"m":{"l":{"b":null},"r":"4"}}`}},
		{"object over scalar then merged", `{"a":3}`, []string{`{"a":{"b":1}}`, `{"a":{"b":null}}`}},
		{"null inside a set object", `{"a":1}`, []string{`{"a":{"b":null}}`, `{"c":2}`}},
		{"duplicate key in the doc", `{"a":1,"b":2,"a":3}`, []string{`{"a":null}`, `{"a":5}`, `{"a":6}`}},
		{"duplicate key in a patch", `{"a":1}`, []string{`{"b":1,"b":2}`, `{"b":3}`}},
		{"duplicates both", `{"a":1,"a":2}`, []string{`{"a":3,"a":4}`, `{"a":null,"a":null}`, `{"a":5}`}},
		{"spaces", `{ "a" : { "b" : 1 , "c" : [ 1 , 2 ] } , "d" : 2 }`, []string{`{"a":{"b":2}}`, `{ "a" : { "e" : { "f" : 1 } } }`}},
		{"spaces in a set value", `{"a":1,"b":2}`, []string{`{"a":{ "x" : 1 , "y" : 2 }}`, `{"a":{"x":3}}`}},
		{"empty patches", `{ "a" : 1 }`, []string{`{}`, `{}`}},
		{"empty nested patch", `{"a":{ "b" : 1 },"c":2}`, []string{`{"a":{}}`, `{"c":3}`}},
		{"tail copied", `{"m":{"r":"1","l":{"a":"b"}},"s":{"x":[1,{"y":"z"}]},"t":"u"}`, []string{`{"m":{"r":"2"}}`, `{"m":{"r":"3","l":{"a":"c"}}}`}},
		{"tail with a space", `{"m":{"r":"1"},"s":"a b"}`, []string{`{"m":{"r":"2"}}`, `{"m":{"r":"3"}}`}},
		{"trailing newline", "{\"a\":1,\"b\":2}\n", []string{`{"a":2}`, `{"a":3}`}},
		{"remove absent", `{"a":1}`, []string{`{"x":null}`, `{"a":2}`}},
		{"everything removed", `{"a":1,"b":{"c":1}}`, []string{`{"a":null}`, `{"b":null}`}},
		{"metadata relabel", `{"kind":"Pod","metadata":{"name":"a","labels":{"c":"y","s":"y"},"managedFields":[{"f":{"f:labels":{}}}]},"spec":{"x":[1]}}`, []string{`{"metadata":{"labels":{"c":null}}}`, `{"metadata":{"labels":{"c":"w"}}}`, `{"metadata":{"labels":{"s":"v"}}}`}},
		{"metadata removed then added", `{"metadata":{"labels":{"c":"y"}},"s":1}`, []string{`{"metadata":null}`, `{"metadata":{"labels":{}}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ps [][]byte
			for _, p := range tc.patches {
				ps = append(ps, []byte(p))
			}
			sameAsOneByOne(t, []byte(tc.doc), ps)
		})
	}
	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct{ doc, p1, p2 string }{
			{`[1]`, `{"a":1}`, `{"b":1}`},
			{`{"a":1}`, `{"a":1}`, `[1]`},
			{`{"a":{"b":1}`, `{"a":{"b":2}}`, `{"a":{"b":3}}`},
		} {
			if got, err := applyReverseChain([]byte(c.doc), [][]byte{[]byte(c.p1), []byte(c.p2)}, rawjson.Span{}); err == nil {
				t.Errorf("doc %s patches %s %s: %s, want an error", c.doc, c.p1, c.p2, got)
			}
		}
	})
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(48, 7))
		for range 20000 {
			doc := randJSON(rng, 3, false)
			ps := make([][]byte, rng.IntN(6)+2)
			for i := range ps {
				ps[i] = randJSON(rng, 3, true)
			}
			sameAsOneByOne(t, doc, ps)
		}
	})
	t.Run("reverse chains", func(t *testing.T) {
		// The writer's own reverse patches, newest first, from a state
		// back: what a rebuild applies.
		rng := rand.New(rand.NewPCG(48, 8))
		chains := 0
		for range 2000 {
			o := randObject(rng, 3)
			states := [][]byte{must(json.Marshal(o))}
			for range rng.IntN(8) + 2 {
				o = mutate(rng, o, 3)
				states = append(states, must(json.Marshal(o)))
			}
			var ps [][]byte
			for k := len(states) - 1; k > 0; k-- {
				_, rev := mergePatches(states[k-1], states[k])
				if rev == nil {
					break
				}
				ps = append(ps, rev)
			}
			if len(ps) < 2 {
				continue
			}
			chains++
			sameAsOneByOne(t, states[len(states)-1], ps)
			got, err := applyReverseChain(states[len(states)-1], ps, rawjson.Span{})
			if want := states[len(states)-1-len(ps)]; err != nil || !bytes.Equal(got, want) {
				t.Fatalf("back %d states: %s, %v; want %s", len(ps), got, err, want)
			}
		}
		if chains < 100 {
			t.Errorf("only %d chains of two reverse patches or more", chains)
		}
	})
	t.Run("pods", func(t *testing.T) {
		for i := range 10 {
			for _, c := range []struct {
				name  string
				state func(c int) []byte
			}{
				{"relabel", func(c int) []byte {
					return bytes.Replace(benchdata.Pod("c1", i, 1), []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
				}},
				{"status", func(c int) []byte { return benchdata.Pod("c1", i, c+1) }},
			} {
				const n = 128
				cur := c.state(n)
				var ps [][]byte
				for k := n; k > 0; k-- {
					_, rev := mergePatches(c.state(k-1), c.state(k))
					if rev == nil {
						t.Fatalf("pod %d, %s %d: no reverse patch", i, c.name, k)
					}
					ps = append(ps, rev)
				}
				row, err := rawjson.FindRowSpans(cur, "")
				if err != nil {
					t.Fatal(err)
				}
				for _, back := range []int{2, 15, 127, n} {
					got, err := applyReverseChain(cur, ps[:back], row.Metadata)
					if want := c.state(n - back); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("pod %d, %s, %d back: %s, %v; want %s", i, c.name, back, got, err, want)
					}
				}
			}
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// randJSON is a random JSON object written by hand: keys from a small
// set (so patches meet the document's members and each other's) that
// may repeat, values of every kind, nulls when nulls is set (a patch's
// removals), and white space here and there.
func randJSON(rng *rand.Rand, depth int, nulls bool) []byte {
	var b []byte
	sp := func() {
		if rng.IntN(12) == 0 {
			b = append(b, " \n\t"[rng.IntN(3)])
		}
	}
	var obj func(depth int)
	obj = func(depth int) {
		b = append(b, '{')
		sp()
		for i := range rng.IntN(4) {
			if i > 0 {
				b = append(b, ',')
				sp()
			}
			b = fmt.Appendf(b, `"k%d"`, rng.IntN(5))
			sp()
			b = append(b, ':')
			sp()
			switch n := rng.IntN(8); {
			case n < 3 && depth > 0:
				obj(depth - 1)
			case n == 3 && nulls:
				b = append(b, "null"...)
			case n == 4:
				b = fmt.Appendf(b, `[%d,{"x":null}]`, rng.IntN(3))
			case n == 5:
				b = fmt.Appendf(b, "%d", rng.IntN(4))
			default:
				b = fmt.Appendf(b, `"v%d"`, rng.IntN(4))
			}
			sp()
		}
		b = append(b, '}')
	}
	obj(depth)
	return b
}

// FuzzApplyReverseChain: any three patches over any document, all valid
// JSON, give the same bytes applied in one walk (applyReverseChain) as
// one by one, the first two and all three.
func FuzzApplyReverseChain(f *testing.F) {
	f.Add(`{"a":1,"b":{"c":2}}`, `{"a":null}`, `{"a":{"x":1}}`, `{"b":{"c":null},"a":{"y":2}}`)
	f.Add(`{"metadata":{"labels":{"app":"web"},"resourceVersion":"3"},"spec":{}}`, `{"metadata":{"labels":{"app":"web1"},"resourceVersion":"2"}}`, `{"metadata":{"labels":{"app":"web0"},"resourceVersion":"1"}}`, `{}`)
	f.Add(`{"a":1,"a":2}`, `{"a":3,"a":4}`, `{"a":null,"a":null}`, `{"a":5}`)
	f.Add(`{ "a" : { "b" : 1 } , "c" : [ 1 , 2 ] }`, `{"a":{"b":2}}`, `{ "a" : 7 }`, `{"a":{"d":{"e":null}}}`)
	f.Add(`{"z":1}`, `{"y":{"q":1}}`, `{"y":null,"x":2}`, `{"y":{"r":2},"x":{"s":3}}`)
	f.Fuzz(func(t *testing.T, doc, p1, p2, p3 string) {
		for _, s := range []string{doc, p1, p2, p3} {
			if !json.Valid([]byte(s)) {
				return
			}
		}
		ps := [][]byte{[]byte(p1), []byte(p2), []byte(p3)}
		sameAsOneByOne(t, []byte(doc), ps[:2])
		sameAsOneByOne(t, []byte(doc), ps)
	})
}

// TestResolveFirst: a Pod changed 300 times in several ways (its app
// label, a label added before the others and removed again, its status,
// now and then a large annotation, so that whole states fall both by
// the count and by the bytes) reads back as each of its states: one Pod
// as of each time (Get: the record's state patched back), each change
// with its object (ChangesAfter: stateAt), an as-of list; and
// resolveFirst gives resolveStatesFrom's first state, byte for byte,
// from every revision to the first whole state after it.
func TestResolveFirst(t *testing.T) {
	s, r := openHistory(t, HistoryOptions{})
	ctx := context.Background()
	object := func(c int) []byte {
		pod := benchdata.Pod("c1", 0, 1+c%5)
		pod = bytes.Replace(pod, []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c%11), 1)
		if c%3 == 0 {
			pod = bytes.Replace(pod, []byte(`"labels":{`), []byte(`"labels":{"a-first":"yes",`), 1)
		}
		if c%40 > 30 {
			note := strings.Repeat(fmt.Sprintf("%03d", c), 200)
			pod = bytes.Replace(pod, []byte(`"labels":{`), []byte(`"annotations":{"note":"`+note+`"},"labels":{`), 1)
		}
		return pod
	}
	const changes = 300
	want := applyChanges(t, s, 0, changes, object)
	e := benchdata.Event("c1", 0, 1)
	for c := range want {
		o := query.GetOptions{GVR: benchdata.PodGVR, Cluster: "c1", Namespace: e.GetNamespace(), Name: e.GetName(), AsOf: t0.Add(time.Duration(c)*time.Second + time.Millisecond)}
		got, err := r.Get(ctx, o)
		if err != nil || !bytes.Equal(got.JSON, want[c]) {
			t.Fatalf("as of change %d: %s, %v\nwant %s", c, got.JSON, err, want[c])
		}
		l, err := r.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, AsOf: o.AsOf})
		if err != nil || len(l.Items) != 1 || !bytes.Equal(l.Items[0].JSON, want[c]) {
			t.Fatalf("list as of change %d: %d items, %v", c, len(l.Items), err)
		}
	}
	c := 0
	if err := r.ChangesAfter(ctx, "c1", benchdata.PodGVR, 0, changes+1, func(rev query.Revision) error {
		if !bytes.Equal(rev.Object, want[c]) {
			return fmt.Errorf("change %d: %s\nwant %s", c, rev.Object, want[c])
		}
		c++
		return nil
	}); err != nil || c != len(want) {
		t.Fatalf("%d changes read, want %d: %v", c, len(want), err)
	}
	uid := benchdata.UID("c1", 0)
	var revs []seqRev
	if err := s.db.View(func(txn *bdg.Txn) error {
		if err := eachRevision(txn, "c1", benchdata.PodGVR, uid, func(seq uint64, r revision, _ []byte) (bool, error) {
			revs = append(revs, seqRev{seq, r})
			return true, nil
		}); err != nil {
			return err
		}
		wholes := 0
		for i := range revs {
			// From revision i forward to the first whole state, as
			// stateAt reads them, or to the newest.
			k, newest := i+1, true
			for ; k < len(revs); k++ {
				if revs[k].r.prevWhole {
					k, newest = k+1, false
					wholes++
					break
				}
			}
			states, err := resolveStates(txn, "c1", benchdata.PodGVR, uid, revs[i:k], newest)
			if err != nil {
				return err
			}
			got, err := resolveFirst(txn, "c1", benchdata.PodGVR, uid, revs[i:k], newest, nil, rawjson.Span{})
			if err != nil || !bytes.Equal(got, states[0]) || !bytes.Equal(got, want[i]) {
				return fmt.Errorf("revision %d (%d to %d): %s, %v", i, i, k, got, err)
			}
		}
		if wholes == 0 {
			return fmt.Errorf("no whole state in %d revisions", len(revs))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkApplyReverseChain: a Pod patched back through 127 reverse
// patches (its app label and resourceVersion changed each time: the
// longest chain the whole-state policy leaves, chainCost), one by one
// (applyReverseIn, as resolveStatesFrom applies them) and in one walk
// (applyReverseChain, as resolveFirst does), both given the metadata's
// span as the record's row spans give it.
func BenchmarkApplyReverseChain(b *testing.B) {
	const n = 127
	state := func(c int) []byte {
		pod := bytes.Replace(benchdata.Pod("c1", 7, 1), []byte(`"app":"web"`), fmt.Appendf(nil, `"app":"web%d"`, c), 1)
		return bytes.Replace(pod, []byte(`"resourceVersion":"1"`), fmt.Appendf(nil, `"resourceVersion":"%d"`, c+1), 1)
	}
	cur := state(n)
	var ps [][]byte
	for k := n; k > 0; k-- {
		_, rev := mergePatches(state(k-1), state(k))
		if rev == nil {
			b.Fatalf("change %d: no reverse patch", k)
		}
		ps = append(ps, rev)
	}
	row, err := rawjson.FindRowSpans(cur, "")
	if err != nil {
		b.Fatal(err)
	}
	want := state(0)
	for _, f := range []struct {
		name  string
		apply func() ([]byte, error)
	}{
		{"one-by-one", func() ([]byte, error) {
			doc, md := cur, row.Metadata
			for _, p := range ps {
				var err error
				if doc, err = applyReverseIn(doc, p, md); err != nil {
					return nil, err
				}
				md = rawjson.Span{}
			}
			return doc, nil
		}},
		{"chain", func() ([]byte, error) { return applyReverseChain(cur, ps, row.Metadata) }},
	} {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if got, err := f.apply(); err != nil || !bytes.Equal(got, want) {
					b.Fatalf("%s, %v", got, err)
				}
			}
		})
	}
}
