package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHistoryRevisionsLinked checks that the revisions an as-of rebuild
// reads by the keys its changes' H/ values name (revisionsLinked) are
// those the seek finds (revisionsAt), for every object at every time of
// a random history with deletes, names taken by new uids, unchanged
// deliveries, observed times out of stream order and changes of an
// object at the same time (which share an H/ key); and that the as-of
// list of a store whose H/ entries a binary before the values wrote
// (empty), in part or all, answers as the seek does. The older entries
// are made by emptying the values of a store this binary wrote: the
// older binary wrote the same keys and revisions.
func TestHistoryRevisionsLinked(t *testing.T) {
	cases := []struct {
		name  string
		older func(rng *rand.Rand) bool // which H/ values an older binary wrote
		// linked: some rebuilds must read by key (none when every value is empty).
		linked bool
	}{
		{"values of this binary", func(*rand.Rand) bool { return false }, true},
		{"older empty values mixed in", func(rng *rand.Rand) bool { return rng.IntN(2) == 0 }, true},
		{"older empty values only", func(*rand.Rand) bool { return true }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, r := openHistory(t, HistoryOptions{SnapshotEvery: 3})
			rng := rand.New(rand.NewPCG(48, 15))
			var names []string
			for i := range 24 {
				names = append(names, fmt.Sprintf("p%02d", i))
			}
			type state struct {
				uid         string
				tier, phase string
				rv          int
				at          time.Duration // last change's observed time
			}
			jsonOf := func(name string, st state) []byte {
				return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"ns","uid":%q,"resourceVersion":"%d","labels":{"tier":%q}},"status":{"phase":%q}}`,
					name, st.uid, st.rv, st.tier, st.phase)
			}
			live := map[string]state{}
			const events = 600
			for i := 1; i <= events; i++ {
				name := names[rng.IntN(len(names))]
				cur, ok := live[name]
				at := time.Duration(i) * time.Second
				switch rng.IntN(20) {
				case 0: // observed before earlier events (a buffered publish)
					at -= time.Duration(1+rng.IntN(20)) * time.Second
				case 1: // at the object's last change's time: one H/ key for both
					if ok {
						at = cur.at
					}
				}
				e := &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod",
					Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(i), ObservedUnixNano: t0.Add(at).UnixNano(), Namespaced: true}
				switch k := rng.IntN(20); {
				case ok && k == 0: // delivered again unchanged: the record's seq moves, no revision
					e.Uid, e.Type, e.Object, e.ResourceVersion = cur.uid, fleetviewv1.EventType_EVENT_TYPE_UPSERT, jsonOf(name, cur), fmt.Sprint(cur.rv)
				case ok && k == 1:
					e.Uid, e.Type = cur.uid, fleetviewv1.EventType_EVENT_TYPE_DELETE
					delete(live, name)
				default:
					st := state{uid: fmt.Sprintf("u%d", i), tier: []string{"a", "b"}[rng.IntN(2)], phase: fmt.Sprint(rng.IntN(3)), rv: i, at: at}
					if i%2 == 0 {
						st.uid = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) // packed in r/ keys
					}
					if ok && k < 18 {
						st.uid = cur.uid // an update; else the name is taken by a new uid
					}
					e.Uid, e.Type, e.Object = st.uid, fleetviewv1.EventType_EVENT_TYPE_UPSERT, jsonOf(name, st)
					live[name] = st
				}
				if err := s.Apply(ctx, "c1", []feed.Event{{Seq: uint64(i), Event: e}}, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			emptied, kept := emptyChangedValues(t, s, func() bool { return tc.older(rng) })
			t.Logf("H/ values: %d emptied, %d kept", emptied, kept)

			linked, sought := 0, 0
			err := s.db.View(func(txn *bdg.Txn) error {
				h := newHistIters(txn)
				defer h.close()
				for at := time.Duration(0); at <= events*time.Second; at += 3 * time.Second {
					ts := t0.Add(at).UnixNano()
					tails, links, _, err := changedLinked(ctx, txn, query.ListOptions{GVR: histPods}, nil, ts)
					if err != nil {
						return err
					}
					for i, tl := range tails {
						rec, ok, err := readRecord(txn, append(objPrefix(histPods), tl...))
						if err != nil || !ok {
							if err == nil {
								continue // no record: recordAt asks no revisions
							}
							return err
						}
						uid, ok := recordUID(rec)
						if !ok {
							return fmt.Errorf("%q: no uid in the record", tl)
						}
						got, gotNewest, ok, err := h.revisionsLinked(txn, "c1", histPods, uid, ts, rec.seq, links[i])
						if err != nil {
							return err
						}
						if !ok {
							sought++
							continue
						}
						linked++
						want, wantNewest, err := h.revisionsAt("c1", histPods, uid, ts, nil)
						if err != nil {
							return err
						}
						if !reflect.DeepEqual(got, want) || gotNewest != wantNewest {
							t.Errorf("%q at t0+%v: by key %v (newest %v), sought %v (newest %v)", tl, at, seqsOf(got), gotNewest, seqsOf(want), wantNewest)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rebuilds by key %d, by seek %d", linked, sought)
			if tc.linked && linked == 0 || !tc.linked && linked > 0 {
				t.Errorf("%d rebuilds read by key, want some: %v", linked, tc.linked)
			}
			if sought == 0 {
				t.Errorf("no rebuild fell back to the seek: the history has no case the links cannot vouch for")
			}

			// The list as of each time, whole and in pages, with a label
			// selector (its pre-check) and without, is the one the seek
			// gives (the reference reader's rebuilds seek).
			ref := s.Reader(ReaderOptions{})
			defer ref.Close()
			ref.seekRevisions = true
			list := func(r *Reader, o query.ListOptions) []string {
				var out []string
				for pages := 0; ; pages++ {
					if pages > 100 {
						t.Fatalf("more than 100 pages")
					}
					p, err := r.List(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range p.Items {
						out = append(out, string(it.JSON))
					}
					if o.Continue = p.Continue; o.Continue == "" {
						return out
					}
				}
			}
			tierA, err := labels.Parse("tier=a")
			if err != nil {
				t.Fatal(err)
			}
			for at := time.Duration(0); at <= events*time.Second; at += 7 * time.Second {
				for _, o := range []query.ListOptions{{}, {Limit: 2}, {Labels: tierA}} {
					o.GVR, o.AsOf = histPods, t0.Add(at)
					if got, want := list(r, o), list(ref, o); !slices.Equal(got, want) {
						t.Errorf("as of t0+%v (limit %d, labels %v): listed\n%s\nseeking\n%s", at, o.Limit, o.Labels, got, want)
					}
				}
			}
		})
	}
}

// emptyChangedValues empties the value of each H/ entry for which older
// says so, as a binary before the values wrote it, and counts the entries
// emptied and kept.
func emptyChangedValues(t *testing.T, s *Store, older func() bool) (emptied, kept int) {
	t.Helper()
	if err := s.db.Update(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{changedFamily, sep}})
		var keys [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			if it.Item().ValueSize() != changedValueLen {
				it.Close()
				return fmt.Errorf("H/ value of %d bytes, want %d", it.Item().ValueSize(), changedValueLen)
			}
			if older() {
				keys = append(keys, it.Item().KeyCopy(nil))
			} else {
				kept++
			}
		}
		it.Close()
		for _, k := range keys {
			if err := txn.Set(k, nil); err != nil {
				return err
			}
		}
		emptied = len(keys)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return emptied, kept
}

// readRecord is the decoded record at key; ok is false when there is none.
func readRecord(txn *bdg.Txn, key []byte) (rec record, ok bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, err
	}
	err = item.Value(func(v []byte) error {
		rec, err = decodeRecord(bytes.Clone(v), false)
		return err
	})
	return rec, err == nil, err
}

func seqsOf(at []seqRev) []uint64 {
	var out []uint64
	for _, sr := range at {
		out = append(out, sr.seq)
	}
	return out
}
