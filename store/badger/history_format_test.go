package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
)

func TestPackUID(t *testing.T) {
	cases := []struct {
		uid    string
		packed bool
	}{
		{"0f3c8a52-9b1d-4e6f-a7c2-5d8e9f0a1b2c", true},
		{"00000000-0000-0000-0000-000000000000", true},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", true},
		{"0F3C8A52-9B1D-4E6F-A7C2-5D8E9F0A1B2C", false}, // upper case would come back lower
		{"0f3c8a52-9b1d-4e6f-a7c2-5d8e9f0a1b2", false},
		{"0f3c8a52-9b1d-4e6f-a7c25-d8e9f0a1b2c", false},
		{"0f3c8a529b1d4e6fa7c25d8e9f0a1b2c----", false},
		{"0f3c8a52-9b1d-4e6f-a7c2-5d8e9f0a1b2g", false},
		{"u1", false},
		{"", false},
	}
	for _, tc := range cases {
		t.Run(tc.uid, func(t *testing.T) {
			p := packUID(tc.uid)
			if (p != nil) != tc.packed {
				t.Fatalf("packed %x, want packed %v", p, tc.packed)
			}
			form := uidForm(tc.uid)
			if tc.packed {
				if len(p) != 17 || p[0] != uidPacked || unpackUID(p) != tc.uid || !bytes.Equal(form, p) {
					t.Errorf("packed %x, back %q, form %x", p, unpackUID(p), form)
				}
			} else if string(form) != tc.uid {
				t.Errorf("form %q, want the text", form)
			}
			// The as-of batch's revision prefix is revPrefix's.
			if got, want := revPrefixIn(revBase("c1", histPods), tc.uid), revPrefix("c1", histPods, tc.uid); !bytes.Equal(got, want) {
				t.Errorf("revPrefixIn %q, revPrefix %q", got, want)
			}
			// A t/ value's uid field gives the uid back, in either form.
			back, rest, err := cutUID(append(appendUID(nil, tc.uid), 'x'))
			if err != nil || back != tc.uid || string(rest) != "x" {
				t.Errorf("cutUID %q %q %v", back, rest, err)
			}
		})
	}
}

// randObject is a random JSON object of a few levels, compact, each
// member's key unique, values strings, numbers, arrays and objects.
func randObject(rng *rand.Rand, depth int) map[string]any {
	o := map[string]any{}
	for i := range rng.IntN(5) + 1 {
		k := fmt.Sprintf("k%d", rng.IntN(6)+i)
		switch n := rng.IntN(6); {
		case n < 2 && depth > 0:
			o[k] = randObject(rng, depth-1)
		case n == 2:
			o[k] = []any{rng.IntN(3), "x"}
		case n == 3:
			o[k] = rng.IntN(4)
		default:
			o[k] = fmt.Sprintf("v%d", rng.IntN(4))
		}
	}
	return o
}

// mutate changes, adds and removes members of o, at every level.
func mutate(rng *rand.Rand, o map[string]any, depth int) map[string]any {
	out := map[string]any{}
	for k, v := range o {
		switch n := rng.IntN(8); {
		case n == 0: // removed
		case n == 1:
			out[k] = fmt.Sprintf("w%d", rng.IntN(4))
		case n == 2 && depth > 0:
			out[k] = randObject(rng, depth-1)
		default:
			if m, ok := v.(map[string]any); ok {
				out[k] = mutate(rng, m, depth-1)
			} else {
				out[k] = v
			}
		}
	}
	if rng.IntN(3) == 0 {
		out[fmt.Sprintf("z%d", rng.IntN(3))] = rng.IntN(5)
	}
	return out
}

// TestForwardFromReverse: the forward patch made from a change's reverse
// patch and its new state is the one the writer's scan made with it
// (format 3 stored it), byte for byte, and applies to the old state.
func TestForwardFromReverse(t *testing.T) {
	cases := []struct{ name, old, cur string }{
		{"one label", `{"metadata":{"name":"p","labels":{"app":"web"}},"spec":{}}`, `{"metadata":{"name":"p","labels":{"app":"web2"}},"spec":{}}`},
		{"added", `{"a":1}`, `{"a":1,"b":{"c":"d"}}`},
		{"removed", `{"a":1,"b":{"c":"d"}}`, `{"a":1}`},
		{"object to scalar", `{"a":{"b":1},"c":2}`, `{"a":3,"c":2}`},
		{"scalar to object", `{"a":3,"c":2}`, `{"a":{"b":1},"c":2}`},
		{"array", `{"s":{"c":[{"ready":true}]}}`, `{"s":{"c":[{"ready":false}]}}`},
		{"nothing", `{"a":1}`, `{"a":1}`},
		{"nested add and remove", `{"m":{"x":{"y":1,"z":2}}}`, `{"m":{"x":{"y":1}},"n":"v"}`},
		// A label whose key sorts first: no forward patch gives the
		// bytes back, the reverse one does.
		{"added before kept", `{"metadata":{"labels":{"app":"web"},"rv":"1"}}`, `{"metadata":{"labels":{"aaa":"x","app":"web"},"rv":"2"}}`},
	}
	check := func(t *testing.T, old, cur []byte) bool {
		t.Helper()
		pp := newPatchPair(old, cur)
		if _, err := diffLevel(&pp, old, 0, cur, 0, true); err != nil || pp.rbad {
			return false // no reverse patch: the state is stored whole
		}
		fwd, err := forwardFromReverse(cur, pp.r)
		if err != nil {
			t.Fatalf("forwardFromReverse(%s, %s): %v", cur, pp.r, err)
		}
		if !bytes.Equal(fwd, pp.f) {
			t.Fatalf("old %s cur %s rev %s: forward %s, want %s", old, cur, pp.r, fwd, pp.f)
		}
		if back, err := rawApplyMergePatch(cur, pp.r); err != nil || !bytes.Equal(back, old) {
			return true // not stored as a patch (mergePatches applies it)
		}
		if got, err := rawApplyMergePatch(old, fwd); err != nil || !bytes.Equal(got, cur) {
			if pp.fx {
				t.Fatalf("old %s + forward %s = %s, want %s", old, fwd, got, cur)
			}
		}
		return true
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !check(t, []byte(tc.old), []byte(tc.cur)) {
				t.Fatalf("no reverse patch for %s -> %s", tc.old, tc.cur)
			}
		})
	}
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(48, 1))
		checked := 0
		for range 5000 {
			o := randObject(rng, 3)
			old, _ := json.Marshal(o)
			cur, _ := json.Marshal(mutate(rng, o, 3))
			if check(t, old, cur) {
				checked++
			}
		}
		if checked < 1000 {
			t.Errorf("only %d of 5000 changes had a reverse patch", checked)
		}
	})
}

func TestRevisionFormats(t *testing.T) {
	state := bytes.Repeat([]byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"image":"nginx"}]}}`), 20)
	cases := []struct {
		name string
		r    revision
		v3   bool
	}{
		{"patch", revision{typ: query.ChangeModified, time: 7, rv: "9", manager: "kubelet", op: "Update", sub: "status", prev: []byte(`{"a":1}`)}, false},
		{"whole previous state", revision{typ: query.ChangeModified, time: 7, rv: "9", prev: state, prevWhole: true}, false},
		{"own state", revision{typ: query.ChangeDeleted, time: 7, rv: "9", prev: []byte("{}"), own: state}, false},
		{"both", revision{typ: query.ChangeModified, time: 7, prev: state, prevWhole: true, own: state[:100]}, false},
		{"baseline", revision{typ: query.ChangeModified}, false},
		{"format 3 with its forward patch", revision{typ: query.ChangeModified, time: 7, rv: "9", fwd: []byte(`{"a":2}`), prev: state, prevWhole: true, own: state}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			enc := encodeRevision
			if tc.v3 {
				enc = encodeRevisionV3
			}
			v := enc(tc.r)
			got, err := decodeRevision(v)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.r) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, tc.r)
			}
			if !tc.v3 && (tc.r.prevWhole || tc.r.own != nil) && len(v) >= len(tc.r.prev)+len(tc.r.own) {
				t.Errorf("%d bytes stored for %d bytes of states: not compressed", len(v), len(tc.r.prev)+len(tc.r.own))
			}
		})
	}
	if _, err := decodeRevision([]byte{revFormat, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, revHasOwn, 0xff, 0xff}); err == nil {
		t.Error("a corrupt compressed state decoded")
	}
}

// uuidOf is a canonical uid for test object n.
func uuidOf(n int) string { return fmt.Sprintf("0f3c8a52-9b1d-4e6f-a7c2-%012x", n) }

// formatScript is a history that crosses a snapshot (SnapshotEvery 4),
// deletes, a name taken by a new uid and a uid in text form; legacyUntil
// is the seq up to which the store writes an older binary's forms.
func formatScript() []feed.Event {
	a, c, d, e, f := uuidOf(1), uuidOf(3), uuidOf(4), uuidOf(5), uuidOf(6)
	return []feed.Event{
		podUpsert(1, a, "p1", 1, "a", "Pending", 1),
		podUpsert(2, "u2", "p2", 2, "a", "Pending", 2),
		podUpsert(3, a, "p1", 3, "b", "Pending", 3),
		podUpsert(4, a, "p1", 4, "b", "Running", 4),
		podDelete(5, "u2", "p2", 5, 5),
		podUpsert(6, c, "p3", 6, "a", "Pending", 6),
		podUpsert(7, a, "p1", 7, "c", "Running", 7),
		podUpsert(8, c, "p3", 8, "a", "Running", 8),
		podUpsert(9, e, "p5", 9, "a", "Pending", 9),
		podUpsert(10, "u2b", "p2", 10, "a", "Pending", 10),
		// the switch: the newer binary from here on in the mixed store
		podUpsert(11, a, "p1", 11, "c", "Failed", 11),
		podUpsert(12, a, "p1", 12, "d", "Failed", 12),
		podUpsert(13, c, "p3", 13, "b", "Running", 13),
		podDelete(14, c, "p3", 14, 14),
		podUpsert(15, d, "p4", 15, "a", "Pending", 15),
		podUpsert(16, f, "p5", 16, "b", "Pending", 16), // a new uid takes p5's name
		podUpsert(17, a, "p1", 17, "e", "Failed", 17),
		podUpsert(18, d, "p4", 18, "a", "Running", 18),
		podUpsert(19, a, "p1", 19, "e", "Succeeded", 19),
		podUpsert(20, "u2b", "p2", 20, "b", "Pending", 20),
		podDelete(21, a, "p1", 21, 21),
	}
}

// historyDump is what the history's reads answer, as text: every object's
// revisions (with patches), the change feed with objects, the deleted
// view, a watch's replay.
func historyDump(t *testing.T, r *Reader) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	line := func(rev query.Revision) {
		fmt.Fprintf(&b, "%d %s %s %s/%s uid=%s rv=%s t=%d %s/%s/%s labels=%v\n  object %s\n  patch %s\n", rev.Seq, rev.Cluster, rev.Type,
			rev.Namespace, rev.Name, rev.UID, rev.ResourceVersion, rev.Time.UnixNano(), rev.Manager, rev.Operation, rev.Subresource, rev.Labels, rev.Object, rev.Patch)
	}
	for _, name := range []string{"p1", "p2", "p3", "p4", "p5"} {
		b.WriteString("revisions " + name + "\n")
		for _, rev := range revisionsOf(t, r, name) {
			line(rev)
		}
	}
	for _, o := range []query.ChangesOptions{{Objects: true}, {Types: []query.ChangeType{query.ChangeDeleted}, Objects: true}, {}} {
		fmt.Fprintf(&b, "changes %+v\n", o.Types)
		p, err := r.Changes(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, rev := range p.Changes {
			line(rev)
		}
	}
	// As-of lists rebuild the changed objects from their revisions (both
	// key forms), with a selector matched first against the labels the
	// change feed kept (interned or inline).
	for _, at := range []int{2, 6, 11, 13, 17, 20} {
		for _, sel := range []string{"", "tier=a", "tier in (b,e)"} {
			o := query.ListOptions{GVR: histPods, AsOf: t0.Add(time.Duration(at) * time.Second)}
			if sel != "" {
				s, err := labels.Parse(sel)
				if err != nil {
					t.Fatal(err)
				}
				o.Labels = s
			}
			fmt.Fprintf(&b, "as of t0+%ds %q\n", at, sel)
			p, err := r.List(ctx, o)
			if errors.Is(err, query.ErrOutsideWindow) {
				b.WriteString("  outside the window\n") // every store alike, after retention
				continue
			}
			if err != nil {
				t.Fatalf("as of t0+%ds, %q: %v", at, sel, err)
			}
			for _, it := range p.Items {
				fmt.Fprintf(&b, "  %s %s\n", it.Cluster, it.JSON)
			}
		}
	}
	b.WriteString("replay\n")
	if err := r.ChangesAfter(ctx, "c1", histPods, 0, 100, func(rev query.Revision) error {
		line(rev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// storedHistoryBytes sums the keys and values of the history's families,
// what the byte counters must say.
func storedHistoryBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.db.View(func(txn *bdg.Txn) error {
		for _, fam := range []byte{'r', 'f', 't', 'x', 'H', 'n', 'J'} {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{fam, sep}})
			for it.Rewind(); it.Valid(); it.Next() {
				n += int64(len(it.Item().Key())) + it.Item().ValueSize()
			}
			it.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHistoryOlderFormat: a store whose history an older binary wrote
// (text uids in r/ keys, format 3 revisions with their forward patches,
// f/ values with the uid, format 1 t/ values, x/ values) reads as one
// written in the current forms, also when the newer binary continues it
// (its chains cross from one form to the other), before and after
// retention, and its byte counters stay exact.
func TestHistoryOlderFormat(t *testing.T) {
	script := formatScript()
	stores := []struct {
		name        string
		legacyUntil uint64
	}{
		{"current", 0},
		{"older", 100},
		{"older then current", 10},
	}
	type opened struct {
		s *Store
		r *Reader
	}
	var open []opened
	for _, st := range stores {
		s, r := openHistory(t, HistoryOptions{SnapshotEvery: 4, Retention: time.Hour})
		if st.legacyUntil > 0 {
			// A store that kept history before the packed uids has no mark.
			if err := s.db.Update(func(txn *bdg.Txn) error { return txn.Delete(packedRevsKey) }); err != nil {
				t.Fatal(err)
			}
		}
		// Batches of up to three, each written by one binary.
		var batch []feed.Event
		for i, e := range script {
			batch = append(batch, e)
			legacy := e.Seq <= st.legacyUntil
			if len(batch) == 3 || i == len(script)-1 || legacy != (script[i+1].Seq <= st.legacyUntil) {
				s.histLegacy = legacy
				apply(t, s, batch...)
				batch = nil
			}
		}
		s.histLegacy = false
		open = append(open, opened{s, r})
	}
	// What is stored differs.
	var textKeys [3]int
	for i, o := range open {
		if err := o.s.db.View(func(txn *bdg.Txn) error {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'r', sep}})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				if bytes.Contains(it.Item().Key(), []byte(uuidOf(1))) {
					textKeys[i]++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if textKeys[0] != 0 || textKeys[1] == 0 || textKeys[2] == 0 || textKeys[2] >= textKeys[1] {
		t.Fatalf("p1's revisions under its text uid per store: %v", textKeys)
	}
	want := historyDump(t, open[0].r)
	if !strings.Contains(want, "patch {\"metadata\":{\"resourceVersion\":\"3\",\"labels\":{\"tier\":\"b\"}}}") {
		t.Fatalf("the dump lacks p1's label change patch:\n%s", want)
	}
	check := func(step string) {
		for i, o := range open {
			if got := historyDump(t, o.r); got != want {
				t.Errorf("%s: %s store reads\n%s\nthe current store\n%s", step, stores[i].name, got, want)
			}
			counted, err := o.s.historyBytes()
			if err != nil {
				t.Fatal(err)
			}
			if stored := storedHistoryBytes(t, o.s); counted != stored {
				t.Errorf("%s: %s store counts %d history bytes, holds %d", step, stores[i].name, counted, stored)
			}
		}
	}
	check("written")
	for _, at := range []int{4, 9, 12, 15, 30} {
		for _, o := range open {
			if err := o.s.Retain(context.Background(), t0.Add(time.Hour+time.Duration(at)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		want = historyDump(t, open[0].r)
		check(fmt.Sprintf("retained to %d s", at))
	}
}

// storedKeys is how many keys the store holds under prefix.
func storedKeys(t *testing.T, s *Store, prefix []byte) int {
	t.Helper()
	n := 0
	if err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHistoryLabelsInterned: a change's labels are kept once per label
// set and epoch (J/), the feed's label selector and labels read through
// them, retention removes an epoch's entries with its last change, and
// the byte counters stay exact.
func TestHistoryLabelsInterned(t *testing.T) {
	s, r := openHistory(t, HistoryOptions{Retention: time.Hour})
	ctx := context.Background()
	hour := int(time.Hour / time.Second)
	// Epoch of t0: three pods, two sharing a label set; two hours later:
	// one of them changed.
	apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 0), podUpsert(2, "u2", "p2", 2, "a", "Pending", 1),
		podUpsert(3, "u3", "p3", 3, "b", "Pending", 2))
	apply(t, s, podUpsert(4, "u1", "p1", 4, "a", "Running", 3))
	if got := storedKeys(t, s, []byte{'J', sep}); got != 2 {
		t.Fatalf("%d label sets interned, want 2 (tier a, tier b)", got)
	}
	apply(t, s, podUpsert(5, "u2", "p2", 5, "c", "Pending", 2*hour))
	if got := storedKeys(t, s, []byte{'J', sep}); got != 3 {
		t.Fatalf("%d label sets interned, want 3 (a new epoch)", got)
	}
	selected := func(sel string) []uint64 {
		l, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.Changes(ctx, query.ChangesOptions{Labels: l})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, c := range p.Changes {
			if c.Labels["app"] != "web" || c.Labels["tier"] == "" {
				t.Errorf("change %d labels %v", c.Seq, c.Labels)
			}
			seqs = append(seqs, c.Seq)
		}
		return seqs
	}
	exact := func(step string) {
		t.Helper()
		counted, err := s.historyBytes()
		if err != nil {
			t.Fatal(err)
		}
		if stored := storedHistoryBytes(t, s); counted != stored {
			t.Errorf("%s: %d history bytes counted, %d stored", step, counted, stored)
		}
	}
	if got := selected("tier=a"); !slices.Equal(got, []uint64{1, 2, 4}) {
		t.Errorf("tier=a: %v", got)
	}
	exact("written")
	// Past the first epoch's changes: its label sets go with them.
	if err := s.Retain(ctx, t0.Add(time.Hour+time.Duration(hour+10)*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := storedKeys(t, s, []byte{'J', sep}); got != 1 {
		t.Errorf("%d label sets after retention, want 1", got)
	}
	if got := selected("tier=c"); !slices.Equal(got, []uint64{5}) {
		t.Errorf("tier=c after retention: %v", got)
	}
	exact("retained")
	// A change observed in an epoch retention has (nearly) passed keeps
	// its labels inline: its epoch's entries may be going.
	apply(t, s, podUpsert(6, "u3", "p3", 6, "d", "Pending", 4))
	if got := storedKeys(t, s, []byte{'J', sep}); got != 1 {
		t.Errorf("%d label sets after a late change, want 1", got)
	}
	if got := selected("tier=d"); !slices.Equal(got, []uint64{6}) {
		t.Errorf("tier=d: %v", got)
	}
	exact("late change")
}

// TestHistoryHead: the uid entry's history head round-trips, with the
// epoch its labels are interned in and without (as an older binary wrote
// it: ending with the resourceVersion).
func TestHistoryHead(t *testing.T) {
	cases := []histHead{
		{},
		{seq: 9, time: 77, chain: 3, rv: "12"},
		{seq: 9, time: 77, chain: 3, rv: "12", labelEpoch: 493123},
	}
	for _, h := range cases {
		got, err := cutHead(appendHead(nil, h))
		if err != nil || got != h {
			t.Errorf("head %+v read back as %+v, %v", h, got, err)
		}
	}
	if _, err := cutHead(append(appendHead(nil, cases[2]), 0x80)); err == nil {
		t.Error("a head with a truncated epoch read")
	}
}

// TestHistoryLabelsKnown: an update that keeps its object's labels names
// the J/ entry its uid entry says they are in, also in a new process
// (nothing cached), and the feed reads them.
func TestHistoryLabelsKnown(t *testing.T) {
	dir := t.TempDir()
	h := HistoryOptions{Retention: 24 * time.Hour, MaxBytes: 1 << 30, RetainInterval: -1}
	open := func() (*Store, *Reader) {
		s, err := Open(Options{Dir: dir, History: h, ValueLogGCInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Reader(ReaderOptions{})
	}
	s, r := open()
	apply(t, s, podUpsert(1, "u1", "p1", 1, "a", "Pending", 0))
	r.Close()
	s.Close()
	s, r = open()
	defer func() {
		r.Close()
		s.Close()
	}()
	head := func() histHead {
		var u uidState
		if err := s.db.View(func(txn *bdg.Txn) error {
			item, err := txn.Get(uidKey("c1", histPods, "u1"))
			if err != nil {
				return err
			}
			return item.Value(func(v []byte) (err error) {
				u, err = decodeUIDEntry(v, histPods, "c1")
				return err
			})
		}); err != nil {
			t.Fatal(err)
		}
		return u.head
	}
	want := labelEpochOf(t0.UnixNano()) + 1
	if got := head().labelEpoch; got != want {
		t.Fatalf("head's label epoch %d, want %d", got, want)
	}
	apply(t, s, podUpsert(2, "u1", "p1", 2, "a", "Running", 1)) // the same labels
	apply(t, s, podUpsert(3, "u1", "p1", 3, "b", "Running", 2)) // others
	if got := head().labelEpoch; got != want {
		t.Errorf("head's label epoch %d after the changes, want %d", got, want)
	}
	// Another object with the first process's set (the new process
	// loaded the hour's entries: present, compared, not written again)
	// and one with a set of its own (absent: written without a read).
	apply(t, s, podUpsert(4, "u2", "p2", 4, "a", "Pending", 3), podUpsert(5, "u3", "p3", 5, "z", "Pending", 4))
	if got := storedKeys(t, s, []byte{'J', sep}); got != 3 {
		t.Errorf("%d label sets, want 3", got)
	}
	counted, err := s.historyBytes()
	if err != nil {
		t.Fatal(err)
	}
	if stored := storedHistoryBytes(t, s); counted != stored {
		t.Errorf("%d history bytes counted, %d stored", counted, stored)
	}
	p, err := r.Changes(context.Background(), query.ChangesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tiers []string
	for _, c := range p.Changes {
		tiers = append(tiers, c.Labels["tier"])
	}
	if !slices.Equal(tiers, []string{"a", "a", "b", "a", "z"}) {
		t.Errorf("the changes' tiers %v", tiers)
	}
}

func TestInternCache(t *testing.T) {
	c := newInternCache()
	a, b := internRef{epoch: 5, hash: 1}, internRef{epoch: 5, hash: 2}
	check := func(step string, id internRef, present, verified, complete, tried bool) {
		t.Helper()
		p, v, cm, tr := c.lookup("c1", id)
		if p != present || v != verified || cm != complete || tr != tried {
			t.Errorf("%s: %+v present %v verified %v complete %v tried %v", step, id, p, v, cm, tr)
		}
	}
	check("empty", a, false, false, false, false)
	c.load("c1", 5, []uint64{1})
	check("loaded", a, true, false, true, true)
	check("loaded, absent", b, false, false, true, true)
	c.add("c1", map[internRef]bool{b: true})
	check("committed", b, true, true, true, true)
	c.load("c1", 7, nil) // hour 5 is two before: forgotten
	check("an older hour", a, false, false, false, false)
	c.load("c1", 8, make([]uint64, internCacheMax+1))
	check("over the bound", internRef{epoch: 8, hash: 0}, false, false, false, true)
	c.add("c1", map[internRef]bool{{epoch: 9, hash: 3}: true})
	for i := range internCacheMax {
		c.add("c2", map[internRef]bool{{epoch: 9, hash: uint64(i)}: true})
	}
	check("after the memory started over", internRef{epoch: 9, hash: 3}, false, false, false, false)
}
