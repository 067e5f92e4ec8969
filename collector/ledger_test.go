package collector

import (
	"slices"
	"testing"
)

func ledgerMeta(uid, ns, name, rv string) objMeta {
	return objMeta{uid: uid, namespace: ns, name: name, rv: rv}
}

func TestLedgerPut(t *testing.T) {
	l := newLedger()
	if _, known, d := l.put(ledgerMeta("u1", "ns", "a", "1"), 1); known || d != nil {
		t.Fatalf("first put: known %v, displaced %v", known, d)
	}
	old, known, d := l.put(ledgerMeta("u1", "ns", "a", "2"), 0)
	if !known || old.rv != "1" || old.gen != 1 || d != nil {
		t.Fatalf("second put: old %+v known %v displaced %v", old, known, d)
	}
	// A watch (generation 0) keeps the generation the list gave it.
	if got := l.unseen(1); len(got) != 0 {
		t.Fatalf("a watch's put lost the list generation: unseen %v", got)
	}
	// Recreated under the same name: the old uid is displaced and forgotten,
	// with its refusal.
	l.refuse("u1", "ns/a (too large)")
	_, known, d = l.put(ledgerMeta("u2", "ns", "a", "3"), 0)
	if known || d == nil || d.uid != "u1" || d.ref.rv != "2" || d.ref.ns != "ns" || d.ref.name != "a" {
		t.Fatalf("recreated: known %v, displaced %+v", known, d)
	}
	if l.size() != 1 || len(l.refusedObjects()) != 0 {
		t.Fatalf("after displacement: size %d, refused %v", l.size(), l.refusedObjects())
	}
}

func TestLedgerUnseen(t *testing.T) {
	l := newLedger()
	g1 := l.nextGen()
	l.put(ledgerMeta("u1", "ns", "a", "1"), g1)
	l.put(ledgerMeta("u2", "ns", "b", "1"), g1)
	g2 := l.nextGen()
	if g2 == g1 {
		t.Fatalf("nextGen returned %d twice", g1)
	}
	l.put(ledgerMeta("u1", "ns", "a", "1"), g2)
	got := l.unseen(g2)
	if len(got) != 1 || got[0].uid != "u2" || got[0].ref.name != "b" {
		t.Fatalf("unseen by generation %d: %+v, want u2 only", g2, got)
	}
}

func TestLedgerRemoveAndPutBack(t *testing.T) {
	l := newLedger()
	l.put(ledgerMeta("u1", "ns", "a", "1"), 1)
	if ref := l.remove("u1", objRef{ns: "other"}); ref.ns != "ns" || ref.name != "a" || ref.rv != "1" {
		t.Fatalf("remove of a known uid returned %+v", ref)
	}
	if ref := l.remove("u9", objRef{ns: "fb", name: "x"}); ref.ns != "fb" || ref.name != "x" {
		t.Fatalf("remove of an unknown uid returned %+v, want the fallback", ref)
	}
	if l.size() != 0 {
		t.Fatalf("size %d after removing everything", l.size())
	}
	// A tombstone that failed: put back, unseen by every list.
	l.putBack("u1", objRef{rv: "2", ns: "ns", name: "a", gen: 7})
	if got := l.unseen(7); len(got) != 1 || got[0].uid != "u1" || got[0].ref.gen != 0 {
		t.Fatalf("put back: unseen %+v, want u1 with generation 0", got)
	}
	// Something newer took its place: putBack leaves it.
	l.put(ledgerMeta("u1", "ns", "a", "3"), 8)
	l.putBack("u1", objRef{rv: "2", ns: "ns", name: "a"})
	if old, _, _ := l.put(ledgerMeta("u1", "ns", "a", "3"), 8); old.rv != "3" {
		t.Fatalf("putBack replaced a newer version: %+v", old)
	}
	// The name now held by u1 is not taken by a put-back uid.
	l.putBack("u2", objRef{rv: "1", ns: "ns", name: "a"})
	if ref := l.remove("u1", objRef{}); ref.rv != "3" {
		t.Fatalf("remove u1: %+v", ref)
	}
	if _, _, d := l.put(ledgerMeta("u3", "ns", "a", "1"), 9); d != nil {
		t.Fatalf("the put-back u2 claimed a name another uid held: displaced %+v", d)
	}
}

func TestLedgerUnknown(t *testing.T) {
	l := newLedger()
	l.put(ledgerMeta("u1", "ns", "a", "1"), 1)
	l.unknown("u1", "0") // an older version failed: the newer one stands
	if old, _, _ := l.put(ledgerMeta("u1", "ns", "a", "1"), 1); old.stale {
		t.Fatal("a failure of an older version marked the current one unknown")
	}
	l.unknown("u1", "1")
	old, _, _ := l.put(ledgerMeta("u1", "ns", "a", "1"), 1)
	if !old.stale || old.gen != 1 {
		t.Fatalf("after a failure of the current version: %+v, want stale and generation 1 kept", old)
	}
	l.unknown("u9", "1") // unknown uid: nothing recorded
	if l.size() != 1 {
		t.Fatalf("size %d", l.size())
	}
}

func TestLedgerRefused(t *testing.T) {
	l := newLedger()
	l.refuse("u2", "ns/b")
	l.refuse("u1", "ns/a")
	if got := l.refusedObjects(); !slices.Equal(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("refused %v", got)
	}
	if !l.clearRefused("u1") || l.clearRefused("u1") {
		t.Fatal("clearRefused reports a refusal once")
	}
	l.put(ledgerMeta("u2", "ns", "b", "1"), 1)
	l.remove("u2", objRef{})
	if got := l.refusedObjects(); len(got) != 0 {
		t.Fatalf("a removed object is still refused: %v", got)
	}
}

func TestLedgerLoadAndClear(t *testing.T) {
	l := newLedger()
	l.load("u1", objRef{rv: "1", ns: "ns", name: "a", stale: true})
	old, known, _ := l.put(ledgerMeta("u1", "ns", "a", "1"), 1)
	if !known || !old.stale {
		t.Fatalf("loaded ref: %+v known %v", old, known)
	}
	g := l.nextGen()
	l.clear()
	if l.size() != 0 || len(l.unseen(g)) != 0 {
		t.Fatalf("after clear: size %d", l.size())
	}
	if l.nextGen() != g+1 {
		t.Fatal("clear reset the list generation")
	}
}
