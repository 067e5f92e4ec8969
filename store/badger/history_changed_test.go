package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var histConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// changeEvent is an upsert of name (of gvr, in ns) at rv, observed at t0+at s.
func changeEvent(seq uint64, cluster string, gvr schema.GroupVersionResource, ns, name string, rv, at int) feed.Event {
	uid := cluster + "-" + gvr.Resource + "-" + ns + "-" + name
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: &fleetviewv1.GroupVersionResource{Version: gvr.Version, Resource: gvr.Resource},
		Uid: uid, Namespace: ns, Name: name, ResourceVersion: fmt.Sprint(rv), Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT,
		Object:           fmt.Appendf(nil, `{"metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":"%d"}}`, name, ns, uid, rv),
		ObservedUnixNano: t0.Add(time.Duration(at) * time.Second).UnixNano(), Namespaced: true}}
}

// TestHistoryAsOfReadsOwnChanges: an as-of list finds the objects changed
// since its time from its resource's changes alone: another resource's
// changes, in its cluster or another, are not read, however many; a
// later page takes the set its first page read from their snapshot; the
// index holds one entry per change, retention removes it with the change,
// and a store kept before the index gets it when it opens.
func TestHistoryAsOfReadsOwnChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := HistoryOptions{Retention: time.Hour, MaxBytes: 1 << 30, RetainInterval: -1}
	open := func() *Store {
		s, err := Open(Options{Dir: dir, History: h, ValueLogGCInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		// The window starts when the store first kept history: the
		// tests' clock is in the past (openHistory).
		if err := s.db.Update(func(txn *bdg.Txn) error {
			return txn.Set(beganKey, binary.BigEndian.AppendUint64(nil, uint64(t0.Add(-time.Hour).UnixNano())))
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()
	seqs := map[string]uint64{}
	change := func(cluster string, gvr schema.GroupVersionResource, ns, name string, rv, at int) {
		seqs[cluster]++
		if err := s.Apply(ctx, cluster, []feed.Event{changeEvent(seqs[cluster], cluster, gvr, ns, name, rv, at)}, seqs[cluster]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 { // before the as-of time (t0+10s)
		change("c1", histPods, "ns1", fmt.Sprintf("p%d", i), 1, 1)
	}
	// After it: two Pods change (one twice), one in c2; 200 ConfigMap
	// changes in both clusters.
	change("c1", histPods, "ns1", "p1", 2, 11)
	change("c1", histPods, "ns1", "p1", 3, 12)
	change("c2", histPods, "ns2", "p4", 1, 13)
	for i := range 100 {
		change("c1", histConfigMaps, "ns1", fmt.Sprintf("cm%d", i%10), i+1, 11+i)
		change("c2", histConfigMaps, "ns1", fmt.Sprintf("cm%d", i%10), i+1, 11+i)
	}
	asOf := t0.Add(10 * time.Second).UnixNano()
	cases := []struct {
		name      string
		o         query.ListOptions
		read      int
		wantTails []string
	}{
		// Each (cluster, namespace) costs the entry its seek starts
		// from (c1/ns1's first, before t; c2's past c1's), then its
		// changes after t.
		{"pods", query.ListOptions{GVR: histPods}, 4, []string{"ns1/p1/c1", "ns2/p4/c2"}},
		{"pods of c1", query.ListOptions{GVR: histPods, Clusters: []string{"c1"}}, 4, []string{"ns1/p1/c1"}},
		{"pods of ns2", query.ListOptions{GVR: histPods, Namespace: "ns2"}, 2, []string{"ns2/p4/c2"}},
		{"configmaps", query.ListOptions{GVR: histConfigMaps}, 200, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tails [][]byte
			var read int
			if err := s.db.View(func(txn *bdg.Txn) (err error) {
				tails, read, err = changedSince(ctx, txn, tc.o, clusterSet(tc.o.Clusters), asOf)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if read != tc.read {
				t.Errorf("read %d index entries, want %d (the resource's changes since the as-of time)", read, tc.read)
			}
			if tc.wantTails == nil {
				if len(tails) != 20 {
					t.Errorf("%d configmaps changed, want 20", len(tails))
				}
				return
			}
			var got []string
			for _, tl := range tails {
				got = append(got, string(bytes.ReplaceAll(tl, []byte{sep}, []byte("/"))))
			}
			if !slices.Equal(got, tc.wantTails) {
				t.Errorf("changed %q, want %q", got, tc.wantTails)
			}
		})
	}
	// A later page takes the set from the snapshot the first one kept:
	// emptied there, the later pages take the changed Pods' records as
	// they are now (p1 at rv 3, p4 of c2, which was not there then).
	func() {
		r := s.Reader(ReaderOptions{})
		defer r.Close()
		o := query.ListOptions{GVR: histPods, AsOf: t0.Add(10 * time.Second), Limit: 1}
		p, err := r.List(ctx, o)
		if err != nil || len(p.Items) != 1 || p.Continue == "" {
			t.Fatalf("first page: %d items, continue %q, %v", len(p.Items), p.Continue, err)
		}
		c, err := decodeCursor(p.Continue)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		snap, _ := r.snaps.Get(c.Snap, r.now())
		r.mu.Unlock()
		if snap == nil || snap.asOf == nil || len(snap.asOf.tails) != 2 {
			t.Fatalf("the first page's snapshot holds no changed set of 2: %+v", snap)
		}
		snap.asOf.tails, snap.asOf.set = nil, map[string]bool{}
		var rest []string
		for o.Continue = p.Continue; o.Continue != ""; o.Continue = p.Continue {
			if p, err = r.List(ctx, o); err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				var m struct {
					Metadata struct{ Name, ResourceVersion string }
				}
				if err := json.Unmarshal(it.JSON, &m); err != nil {
					t.Fatal(err)
				}
				rest = append(rest, it.Cluster+"/"+m.Metadata.Name+"@"+m.Metadata.ResourceVersion)
			}
		}
		if want := []string{"c1/p1@3", "c1/p2@1", "c1/p3@1", "c1/p4@1", "c1/p5@1", "c2/p4@1"}; !slices.Equal(rest, want) {
			t.Errorf("later pages with the kept set emptied: %q, want %q", rest, want)
		}
	}()
	list := func(r *Reader) []string {
		t.Helper()
		var out []string
		for _, at := range []int{1, 10, 12, 50, 200} {
			for _, gvr := range []schema.GroupVersionResource{histPods, histConfigMaps} {
				o := query.ListOptions{GVR: gvr, AsOf: t0.Add(time.Duration(at) * time.Second), Limit: 4}
				for {
					p, err := r.List(ctx, o)
					if err != nil {
						t.Fatalf("as of t0+%ds: %v", at, err)
					}
					for _, it := range p.Items {
						out = append(out, fmt.Sprintf("%d %s %s", at, it.Cluster, it.JSON))
					}
					if p.Continue == "" {
						break
					}
					o.Continue = p.Continue
				}
			}
		}
		return out
	}
	r := s.Reader(ReaderOptions{})
	before := list(r)
	r.Close()
	if len(before) == 0 {
		t.Fatal("the as-of lists are empty")
	}
	bytesBefore, err := s.historyBytes()
	if err != nil {
		t.Fatal(err)
	}
	if d, tk := familyKeys(t, s, changedFamily), familyKeys(t, s, 't'); d != tk {
		t.Errorf("%d H/ entries for %d changes", d, tk)
	}

	// Older stores: opening one makes H/ from its changes (t/), drops
	// the time-first D/ index a binary before H/ kept (also one that ran
	// on a store with H/: a downgrade), and keeps the history bytes
	// counting what is stored.
	for _, tc := range []struct {
		name string
		// old is a D/ key for a H/ key; keepJ leaves H/ in place.
		old, keepJ bool
	}{
		{"before any change index", false, false},
		{"with the time-first D/ index", true, false},
		{"downgraded: D/ written beside H/", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.db.Update(func(txn *bdg.Txn) error {
				it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{changedFamily, sep}})
				var keys [][]byte
				for it.Rewind(); it.Valid(); it.Next() {
					keys = append(keys, it.Item().KeyCopy(nil))
				}
				it.Close()
				bytesOf := map[string]int64{}
				for _, k := range keys {
					parts := bytes.SplitN(k, []byte{sep}, 5) // H, group, version, resource, rest
					cluster, ns, at, name, err := splitChangedKey(parts[4])
					if err != nil {
						return err
					}
					if !tc.keepJ {
						bytesOf[string(cluster)] -= int64(len(k))
						if err := txn.Delete(k); err != nil {
							return err
						}
					}
					if tc.old {
						d := append(bytes.Join(append([][]byte{{oldChangedFamily}}, parts[1:4]...), []byte{sep}), sep)
						d = binary.BigEndian.AppendUint64(d, uint64(at))
						d = bytes.Join([][]byte{d, ns, name, cluster}, []byte{sep})
						bytesOf[string(cluster)] += int64(len(d))
						if err := txn.Set(d, nil); err != nil {
							return err
						}
					}
				}
				if err := addHistBytes(txn, bytesOf); err != nil {
					return err
				}
				if tc.old {
					if err := txn.Set(oldChangedIndexedKey, nil); err != nil {
						return err
					}
				}
				if tc.keepJ {
					return nil
				}
				return txn.Delete(changedIndexedKey)
			}); err != nil {
				t.Fatal(err)
			}
			if d := familyKeys(t, s, oldChangedFamily); tc.old != (d > 0) {
				t.Fatalf("%d D/ keys before the open", d)
			}
			s.Close()
			s = open()
			if d, tk := familyKeys(t, s, changedFamily), familyKeys(t, s, 't'); d != tk {
				t.Errorf("after indexing an older store: %d H/ entries for %d changes", d, tk)
			}
			if d := familyKeys(t, s, oldChangedFamily); d != 0 {
				t.Errorf("%d D/ entries left", d)
			}
			if got, err := s.historyBytes(); err != nil || got != bytesBefore {
				t.Errorf("history bytes %d after indexing (%v), want %d", got, err, bytesBefore)
			}
			r := s.Reader(ReaderOptions{})
			defer r.Close()
			if after := list(r); !slices.Equal(after, before) {
				t.Errorf("as-of lists after indexing an older store:\n%q\nwant\n%q", after, before)
			}
		})
	}

	// Retention removes an entry with its change.
	if err := s.Retain(ctx, t0.Add(time.Hour+50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, tk := familyKeys(t, s, changedFamily), familyKeys(t, s, 't'); d != tk || d == 0 || d >= 209 {
		t.Errorf("after retention: %d H/ entries for %d changes (209 before)", d, tk)
	}
}

// familyKeys counts the keys of a family.
func familyKeys(t *testing.T, s *Store, family byte) int {
	t.Helper()
	return storedKeys(t, s, []byte{family, sep})
}

// TestHistoryChangedLimited: an as-of list limited to a cluster or a
// namespace reads the changes after its time of that cluster or
// namespace, not the other ones' (100 each here): each (cluster,
// namespace) it passes costs the one entry its seek starts from.
func TestHistoryChangedLimited(t *testing.T) {
	ctx := context.Background()
	s, r := openHistory(t, HistoryOptions{})
	seqs := map[string]uint64{}
	change := func(cluster, ns, name string, rv, at int) {
		seqs[cluster]++
		if err := s.Apply(ctx, cluster, []feed.Event{changeEvent(seqs[cluster], cluster, histPods, ns, name, rv, at)}, seqs[cluster]); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range [][2]string{{"c1", "ns1"}, {"c1", "ns2"}, {"c2", "ns1"}} {
		change(g[0], g[1], "a0", 1, 1) // before the as-of time (t0+10s)
	}
	change("c1", "ns1", "p1", 1, 11)
	change("c1", "ns1", "p2", 1, 12)
	for i := range 100 {
		change("c1", "ns2", fmt.Sprintf("q%d", i%10), i+1, 11+i)
		change("c2", "ns1", fmt.Sprintf("q%d", i%10), i+1, 11+i)
	}
	asOf := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name    string
		o       query.ListOptions
		read    int
		changed int
	}{
		// c1/ns1's first entry (before t), its 2, c1/ns2's first, c2's first.
		{"ns1 of c1", query.ListOptions{Clusters: []string{"c1"}, Namespace: "ns1"}, 5, 2},
		// c1/ns1's first and 2, c1/ns2's first, c2/ns1's first and 100.
		{"ns1", query.ListOptions{Namespace: "ns1"}, 105, 12},
		// c1/ns1's first and 2, c1/ns2's first and 100, c2's first.
		{"c1", query.ListOptions{Clusters: []string{"c1"}}, 105, 12},
		{"c2", query.ListOptions{Clusters: []string{"c2"}}, 101, 10},
		{"ns2 of c2", query.ListOptions{Clusters: []string{"c2"}, Namespace: "ns2"}, 1, 0},
		{"c3", query.ListOptions{Clusters: []string{"c3"}}, 0, 0},
		// Each group's first entry, and its changes after t.
		{"every cluster and namespace", query.ListOptions{}, 205, 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.GVR = histPods
			var tails [][]byte
			var read int
			if err := s.db.View(func(txn *bdg.Txn) (err error) {
				tails, read, err = changedSince(ctx, txn, tc.o, clusterSet(tc.o.Clusters), asOf.UnixNano())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if read != tc.read || len(tails) != tc.changed {
				t.Errorf("read %d entries and found %d objects changed, want %d and %d", read, len(tails), tc.read, tc.changed)
			}
			// The list as of t: the objects there then, of its clusters
			// and namespace (a0 of each; p1, p2 and q* came after).
			tc.o.AsOf = asOf
			p, err := r.List(ctx, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, g := range [][2]string{{"c1", "ns1"}, {"c1", "ns2"}, {"c2", "ns1"}} {
				if (tc.o.Clusters == nil || slices.Contains(tc.o.Clusters, g[0])) && (tc.o.Namespace == "" || tc.o.Namespace == g[1]) {
					want++
				}
			}
			if len(p.Items) != want {
				t.Errorf("as-of list: %d objects, want %d", len(p.Items), want)
			}
		})
	}
}
