package badger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// searchObj is one object of TestSearchIndexFollowsTheObjects: its
// metadata is drawn at random, so names, labels and annotations hold upper
// case, non-ASCII runes and escapes.
type searchObj struct {
	ns, name, uid string
	labels, ann   map[string]string
}

func (o searchObj) event(cluster string, rv int) *fleetviewv1.ResourceEvent {
	meta := map[string]any{"name": o.name, "namespace": o.ns, "uid": o.uid, "resourceVersion": fmt.Sprint(rv),
		"labels": o.labels, "annotations": o.ann}
	obj := mustJSON(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"status": map[string]any{"phase": fmt.Sprint("P", rv)}})
	return &fleetviewv1.ResourceEvent{Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Cluster: cluster,
		Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: o.ns, Name: o.name,
		Uid: o.uid, ResourceVersion: fmt.Sprint(rv), Namespaced: true, Object: obj}
}

// TestSearchIndexFollowsTheObjects: after adds, annotation, label and
// status-only updates, deletes and a name reused by a new uid, a search for
// any of many terms returns exactly the objects whose metadata matches
// (metaMatches, the definition), every object has one search key and no
// key outlives its object, and an update that changes neither labels nor
// searched metadata does not rewrite its search key.
func TestSearchIndexFollowsTheObjects(t *testing.T) {
	s, r := openReader(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	words := []string{"Web", "api", "ÉTÉ", "caf\u00e9", "K\u212aube", "team", "x\"q", "a\\b", "ǅ", "-07", "zz"}
	word := func() string { return words[rng.IntN(len(words))] + fmt.Sprint(rng.IntN(3)) }
	strs := func() map[string]string {
		m := map[string]string{}
		for range rng.IntN(3) {
			m[strings.ToLower(word())] = word()
		}
		return m
	}
	objs := map[string]searchObj{} // by ns/name
	var seq uint64
	rv := 1
	apply := func(evs ...*fleetviewv1.ResourceEvent) {
		var fe []feed.Event
		for _, e := range evs {
			seq++
			fe = append(fe, ev(seq, e))
		}
		if err := s.Apply(ctx, "c1", fe, seq); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		o := searchObj{ns: fmt.Sprintf("ns-%d", i%3), name: fmt.Sprintf("o-%d-%s", i, strings.ToLower(words[i%len(words)][:1])),
			uid: fmt.Sprint("u", i), labels: strs(), ann: strs()}
		objs[o.ns+"/"+o.name] = o
		apply(o.event("c1", rv))
	}
	check := func(step string) {
		t.Helper()
		for _, term := range append(slices.Clone(words), "o-1", "ns-2", "c1", "p1", "zz2", "\u212a", "é", "É") {
			needle := strings.ToLower(term)
			var want []string
			for k, o := range objs {
				if metaMatches(o.event("c1", 0).Object, needle) {
					want = append(want, k)
				}
			}
			var got []string
			o := query.SearchOptions{Text: term, Limit: 7}
			for {
				p, err := r.Search(ctx, o)
				if err != nil {
					t.Fatalf("%s: search %q: %v", step, term, err)
				}
				for _, it := range p.Items {
					_, ns := rawLocationOf(t, it)
					got = append(got, ns+"/"+nameOf(t, it))
				}
				if o.Continue = p.Continue; o.Continue == "" {
					break
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: search %q = %v, want %v", step, term, got, want)
			}
		}
		if o, sk := countPrefix(t, s, 'o'), countPrefix(t, s, 's'); o != len(objs) || sk != len(objs) {
			t.Fatalf("%s: %d objects, %d search keys, want %d of each", step, o, sk, len(objs))
		}
	}
	check("added")

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range objs {
			if !yield(k) {
				return
			}
		}
	})
	// Status-only updates: the search keys keep their versions.
	before := searchKeyVersions(t, s)
	rv++
	var evs []*fleetviewv1.ResourceEvent
	for _, k := range keys {
		evs = append(evs, objs[k].event("c1", rv))
	}
	apply(evs...)
	if after := searchKeyVersions(t, s); !maps.Equal(before, after) {
		t.Fatal("a status-only update rewrote search keys")
	}
	check("status updated")

	// Annotation and label changes, deletes, and names reused by new uids.
	for round := range 3 {
		rv++
		evs = evs[:0]
		for i, k := range keys {
			o, ok := objs[k]
			switch {
			case !ok:
				continue
			case i%5 == round:
				o.ann = strs()
			case i%5 == round+1:
				o.labels = strs()
			case i%7 == round:
				delete(objs, k)
				evs = append(evs, &fleetviewv1.ResourceEvent{Type: fleetviewv1.EventType_EVENT_TYPE_DELETE, Cluster: "c1",
					Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: o.ns, Name: o.name,
					Uid: o.uid, ResourceVersion: fmt.Sprint(rv), Namespaced: true})
				continue
			case i%11 == round:
				o.uid, o.labels, o.ann = fmt.Sprint(o.uid, "-new", round), strs(), strs()
			default:
				continue
			}
			objs[k] = o
			evs = append(evs, o.event("c1", rv))
		}
		apply(evs...)
		check(fmt.Sprint("changed, round ", round))
	}
}

func prefixKeys(txn *bdg.Txn, p byte) [][]byte {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{p, sep}})
	defer it.Close()
	var keys [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	return keys
}

func countPrefix(t *testing.T, s *Store, p byte) int {
	t.Helper()
	n := 0
	if err := s.db.View(func(txn *bdg.Txn) error { n = len(prefixKeys(txn, p)); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func searchKeyVersions(t *testing.T, s *Store) map[string]uint64 {
	t.Helper()
	v := map[string]uint64{}
	if err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'s', sep}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v[string(it.Item().Key())] = it.Item().Version()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
