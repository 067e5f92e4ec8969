package collector

import (
	"sort"
	"sync"
	"sync/atomic"
)

// objRef is everything the collector keeps per object: enough to detect a
// change (rv), to tombstone it (ns, name) and to find objects a list no
// longer returns (gen, the list generation that last saw it).
type objRef struct {
	rv, ns, name string
	gen          uint32
	// stale: what the stream holds for the object is not known to be rv
	// (a publish failed, or it was published under another Secret-data
	// choice), so the next list publishes it even if unchanged.
	stale bool
}

type nsName struct{ ns, name string }

type objRefUID struct {
	ref objRef
	uid string
}

// ledger is what one resource sync knows of the objects it has published
// to the stream: per uid the version and name the stream holds, which
// namespace/name holds which uid (to tombstone an object deleted and
// recreated under its name), the list generation that last saw each, and
// the objects refused for size or shape. Only this is kept per object, not
// the object: that is what keeps the collector's memory small for large
// clusters. Its methods are safe for concurrent use (a resource's watches
// of several namespaces share it).
type ledger struct {
	mu    sync.Mutex
	objs  map[string]objRef // uid -> ref
	byKey map[nsName]string // namespace/name -> uid
	ns    map[string]string // interned namespace names
	gen   uint32
	// refused holds objects refused for size (uid -> description).
	refused map[string]string
	// count is len(objs), readable without the lock (the inventory and
	// metrics read it).
	count atomic.Int64
}

func newLedger() *ledger {
	return &ledger{
		objs:    map[string]objRef{},
		byKey:   map[nsName]string{},
		ns:      map[string]string{},
		refused: map[string]string{},
	}
}

// size is the number of objects the stream is known to hold.
func (l *ledger) size() int64 { return l.count.Load() }

// clear forgets every object (before hydrating from the stream again);
// refusals and the generation are kept.
func (l *ledger) clear() {
	l.mu.Lock()
	l.objs, l.byKey = map[string]objRef{}, map[nsName]string{}
	l.count.Store(0)
	l.mu.Unlock()
}

// load records what the stream holds for uid, as read back from it.
func (l *ledger) load(uid string, ref objRef) {
	l.mu.Lock()
	ref.ns = l.intern(ref.ns)
	l.objs[uid] = ref
	l.byKey[nsName{ref.ns, ref.name}] = uid
	l.count.Store(int64(len(l.objs)))
	l.mu.Unlock()
}

// nextGen starts a list generation and returns it.
func (l *ledger) nextGen() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	return l.gen
}

// unseen returns every object the list generation gen did not see.
func (l *ledger) unseen(gen uint32) []objRefUID {
	var gone []objRefUID
	l.mu.Lock()
	for uid, ref := range l.objs {
		if ref.gen != gen {
			gone = append(gone, objRefUID{ref, uid})
		}
	}
	l.mu.Unlock()
	return gone
}

// put records that uid is at m's version, seen by list generation gen (0,
// from a watch, keeps the generation it had). It returns what was recorded
// for uid before, and, when another uid held the same namespace/name (the
// object was deleted and recreated), that one, which it forgets.
func (l *ledger) put(m objMeta, gen uint32) (old objRef, known bool, displaced *objRefUID) {
	uid := m.uid
	l.mu.Lock()
	defer l.mu.Unlock()
	ref := objRef{rv: m.rv, ns: l.intern(m.namespace), name: m.name, gen: gen}
	key := nsName{ref.ns, ref.name}
	old, known = l.objs[uid]
	if gen == 0 {
		ref.gen = old.gen
	}
	prevUID, hadKey := l.byKey[key]
	l.objs[uid] = ref
	l.byKey[key] = uid
	if hadKey && prevUID != uid {
		displaced = &objRefUID{l.objs[prevUID], prevUID}
		delete(l.objs, prevUID)
		delete(l.refused, prevUID)
	}
	l.count.Store(int64(len(l.objs)))
	return old, known, displaced
}

// remove forgets uid and returns what was recorded for it, or fallback if
// nothing was.
func (l *ledger) remove(uid string, fallback objRef) objRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	ref, known := l.objs[uid]
	if !known {
		ref = fallback
	}
	delete(l.objs, uid)
	delete(l.refused, uid)
	if l.byKey[nsName{ref.ns, ref.name}] == uid {
		delete(l.byKey, nsName{ref.ns, ref.name})
	}
	l.count.Store(int64(len(l.objs)))
	return ref
}

// putBack restores an object whose tombstone was not published, unless
// something newer took its place. No list has seen it, so the next sweep
// retries the tombstone.
func (l *ledger) putBack(uid string, ref objRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.objs[uid]; ok {
		return
	}
	ref.gen = 0
	ref.ns = l.intern(ref.ns)
	l.objs[uid] = ref
	if _, taken := l.byKey[nsName{ref.ns, ref.name}]; !taken {
		l.byKey[nsName{ref.ns, ref.name}] = uid
	}
	l.count.Store(int64(len(l.objs)))
}

// unknown marks what the stream holds for uid as unknown if it is still
// version rv (a newer version has its own acknowledgement coming): the
// next list republishes the object, or, if it is gone by then, the sweep
// after that list tombstones it. The list generation is kept, so the sweep
// of a list that already saw the object does not tombstone it in passing.
func (l *ledger) unknown(uid, rv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ref, ok := l.objs[uid]; ok && ref.rv == rv {
		ref.stale = true
		l.objs[uid] = ref
	}
}

// refuse records an object that will not be published, described by desc.
func (l *ledger) refuse(uid, desc string) {
	l.mu.Lock()
	l.refused[uid] = desc
	l.mu.Unlock()
}

// clearRefused forgets a refusal and reports whether there was one.
func (l *ledger) clearRefused(uid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, was := l.refused[uid]
	delete(l.refused, uid)
	return was
}

// refusedObjects describes the refused objects, sorted.
func (l *ledger) refusedObjects() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.refused))
	for _, d := range l.refused {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// intern returns one copy of each namespace name: a cluster has few
// namespaces and many objects. l.mu must be held.
func (l *ledger) intern(ns string) string {
	if v, ok := l.ns[ns]; ok {
		return v
	}
	l.ns[ns] = ns
	return ns
}
