package badger

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
)

// The history's share of an upsert that depends only on the event and
// the object's previous JSON in the batch's snapshot is made before the
// batch is applied, by prefetchPrevious's parallel workers, not by the
// one goroutine that applies the batch event after event and is the
// pipeline's bottleneck with history on (docs/benchmarks/history.md):
// the merge patches (most of an update's history CPU), the previous
// state compressed when the revision keeps it whole, the change's keys
// and the body of its t/ value. recordUpsert uses what was made only
// when its previous JSON is the very slice the worker read
// (sameSlice): an event whose previous state an earlier event of the
// batch wrote, or that removeResource made read again, takes the
// serial path, which computes the same bytes from the same inputs.

// histPre is what the pre-stage made for one upsert.
type histPre struct {
	// old is the previous JSON as the snapshot held it (nil: none or not
	// read); patched says fwd and rev are mergePatches(old, object) and
	// whole compressState(old) when rev is nil.
	old, fwd, rev, whole []byte
	patched              bool
	// keyed: keys are the change's at time (the event's observed time).
	keys  changeKeys
	time  int64
	keyed bool
	// name is the nameKey when the object was absent (an add writes it).
	name []byte
}

// changeKeys are the keys a change writes (revision, f/, t/, changed
// index) and its t/ value's body (changeBody; nil for a legacy writer,
// which writes format 1).
type changeKeys struct {
	rev, feed, t, changed []byte
	body                  []byte
	seq                   uint64
}

// changeKeysOf makes the keys of change c at time t, event seq.
func (w *writer) changeKeysOf(gvr schema.GroupVersionResource, seq uint64, t int64, c changeEntry) changeKeys {
	ck := changeKeys{
		rev:     w.revKey(gvr, c.uid, seq),
		feed:    feedKey(w.cluster, gvr, seq),
		t:       timeKey('t', t, w.cluster, seq),
		changed: changedKey(gvr, t, w.cluster, c.ns, c.name),
		seq:     seq,
	}
	if !w.hist.legacy {
		ck.body = changeBody(make([]byte, 0, 64+len(c.uid)+len(c.ns)+len(c.name)), c)
	}
	return ck
}

// preHistory makes e's histPre in p: reads the previous JSON at key (nil
// key: not to be read), and, when absent says the object is known not to
// be stored, its name key. It only reads the writer, so workers run it
// side by side before the batch's first write.
func (w *writer) preHistory(e *feed.Event, key []byte, absent bool, p *histPre) error {
	ev := e.Event
	obj := ev.GetObject()
	if key != nil {
		old, err := storedJSON(w.txn, key)
		if err != nil {
			return err
		}
		p.old, absent = old, old == nil
		if old != nil && !w.s.histSerial {
			p.fwd, p.rev = mergePatches(old, obj)
			if p.rev == nil && !w.hist.legacy {
				p.whole = compressState(old)
			}
			p.patched = true
		}
	}
	if w.s.histSerial {
		return nil
	}
	gvr := stream.GVR(ev.GetGvr())
	if absent {
		p.name = nameKey(w.cluster, gvr, ev.GetNamespace(), ev.GetName(), ev.GetUid())
	}
	// An event without an observed time gets the clock's when recorded
	// (eventTime): its keys wait until then.
	if t := ev.GetObservedUnixNano(); t > 0 {
		p.time, p.keyed = t, true
		p.keys = w.changeKeysOf(gvr, e.Seq, t, changeEntry{gvr: gvr, uid: ev.GetUid(), ns: ev.GetNamespace(), name: ev.GetName(),
			rv: ev.GetResourceVersion(), manager: ev.GetManager(), op: ev.GetOperation(), sub: ev.GetSubresource()})
	}
	return nil
}

// sameSlice: a and b are the same bytes in memory, not only equal ones.
func sameSlice(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// encodePacked is encodeRevision(r), given r.prev compressed (packed)
// when the pre-stage made it.
func (w *writer) encodePacked(r revision, packed []byte) []byte {
	if packed == nil || w.hist.legacy || !r.prevWhole || r.own != nil {
		return w.encodeRevision(r)
	}
	return appendRevision(revFormat, r, nil, packed, nil)
}
