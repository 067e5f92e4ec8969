package badger

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

func TestLabelsHash(t *testing.T) {
	// Pairs of label sets that must hash apart: a collision between them
	// would take a label change for none and leave the index stale.
	distinct := []struct{ a, b map[string]string }{
		{nil, map[string]string{"": ""}},
		{map[string]string{"app": "web"}, map[string]string{"app": "api"}},
		{map[string]string{"ab": ""}, map[string]string{"a": "b"}},
		{map[string]string{"a": "b", "c": "d"}, map[string]string{"a": "d", "c": "b"}},
		{map[string]string{"a": "b", "c": "d"}, map[string]string{"a": "b"}},
		{map[string]string{"a": "x", "b": "x"}, map[string]string{"a": "y", "b": "y"}},
	}
	for _, c := range distinct {
		if labelsHash(c.a) == labelsHash(c.b) {
			t.Errorf("labelsHash(%v) == labelsHash(%v)", c.a, c.b)
		}
	}
	// Map order must not matter: the same set, built in different orders
	// (and iterated in Go's random order), hashes the same every time.
	want := labelsHash(map[string]string{"app": "web", "tier": "frontend", "shard": "s1", "pod-template-hash": "7d9f8c0001"})
	for range 20 {
		m := map[string]string{}
		for _, kv := range [][2]string{{"shard", "s1"}, {"pod-template-hash", "7d9f8c0001"}, {"tier", "frontend"}, {"app", "web"}} {
			m[kv[0]] = kv[1]
		}
		if got := labelsHash(m); got != want {
			t.Fatalf("labelsHash of the same labels: %x, then %x", want, got)
		}
	}
}

func TestTail(t *testing.T) {
	cases := []struct {
		key, ns, name, cluster string
		bad                    bool
	}{
		{key: "o\x00v1/pods\x00ns\x00web\x00c1", ns: "ns", name: "web", cluster: "c1"},
		{key: "o\x00v1/nodes\x00\x00n1\x00c2", ns: "", name: "n1", cluster: "c2"},
		{key: "ns\x00web\x00c1", ns: "ns", name: "web", cluster: "c1"},
		{key: "\x00web\x00c1", ns: "", name: "web", cluster: "c1"},
		{key: "web\x00c1", bad: true},
		{key: "c1", bad: true},
		{key: "", bad: true},
	}
	for _, c := range cases {
		ns, name, cluster, err := tail([]byte(c.key))
		if c.bad != (err != nil) || ns != c.ns || name != c.name || cluster != c.cluster {
			t.Errorf("tail(%q) = %q, %q, %q, %v", c.key, ns, name, cluster, err)
		}
	}
}

func TestArenaClone(t *testing.T) {
	var a arena
	var got [][]byte
	var want []string
	for i := range 3000 {
		b := []byte(strings.Repeat(string(rune('a'+i%26)), i%700))
		got = append(got, a.clone(b))
		want = append(want, string(b))
	}
	big := make([]byte, 100<<10)
	got = append(got, a.clone(big))
	want = append(want, string(big))
	for i := range got {
		if string(got[i]) != want[i] {
			t.Fatalf("copy %d changed", i)
		}
		if i < 3000 && len(got[i]) != cap(got[i]) { // in a chunk, not its own allocation
			t.Fatalf("copy %d has room to grow into its neighbour", i)
		}
	}
	got[0] = append(got[0], 'x') // must not write into got[1]
	if string(got[1]) != want[1] {
		t.Fatal("appending to one copy changed the next")
	}
}

func TestArenaConcat(t *testing.T) {
	var a arena
	x, y := []byte("o\x00v1\x00pods\x00"), []byte("ns\x00web\x00c1")
	var got [][]byte
	for range 2000 {
		got = append(got, a.concat(x, y))
	}
	for i, g := range got {
		if string(g) != string(x)+string(y) || cap(g) != len(g) {
			t.Fatalf("concat %d = %q (cap %d)", i, g, cap(g))
		}
	}
	if g := a.concat(make([]byte, 70<<10), y); len(g) != 70<<10+len(y) {
		t.Fatalf("a large concat has %d bytes", len(g))
	}
}

// TestRecordRowSpans: a record keeps the row spans found when it was
// written, or none, and a record cut short or with a bad count is
// corrupt, never misread.
func TestRecordRowSpans(t *testing.T) {
	obj := []byte(`{"metadata":{"name":"a","creationTimestamp":"2026-01-01T00:00:00Z","annotations":{"fleetview.io/cluster":"c1"}}}`)
	row, err := rawjson.FindRowSpans(obj, stream.ClusterAnnotation)
	if err != nil {
		t.Fatal(err)
	}
	alloc := func(n int) []byte { return make([]byte, 0, n) }
	for _, r := range []record{
		{seq: 7, labels: map[string]string{"app": "web"}, cells: []byte(`["a"]`), row: row, json: obj},
		{seq: 8, json: obj},
	} {
		b := encodeRecord(r, alloc)
		got, err := decodeRecord(b, true)
		if err != nil {
			t.Fatal(err)
		}
		if got.seq != r.seq || got.row != r.row || !bytes.Equal(got.json, r.json) || !bytes.Equal(got.cells, r.cells) {
			t.Fatalf("decoded %+v, want %+v", got, r)
		}
		cells := len(r.cells) + 1
		at := 8 + len(appendLabels(nil, r.labels)) + cells // the row's count
		bad := bytes.Clone(b)
		bad[at] = 3
		if _, err := decodeRecord(bad, false); !errors.Is(err, errCorrupt) {
			t.Fatalf("a count of 3: %v, want errCorrupt", err)
		}
		if r.row != (rawjson.RowSpans{}) {
			if _, err := decodeRecord(b[:at+3], false); !errors.Is(err, errCorrupt) {
				t.Fatalf("cut inside the row: %v, want errCorrupt", err)
			}
		}
	}
}
