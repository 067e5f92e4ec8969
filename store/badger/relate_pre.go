package badger

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/relations"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// A batch is applied on one goroutine (Prepare, Apply), and half of what
// the relationship index added to it was reading the new objects:
// relDoc's pass over the JSON (which reads an added Pod's references on
// the way: relations.PodScan), the edges' encoding and their R/ keys
// (measured: docs/benchmarks/relations.md). None of that
// depends on the store, only on the object, so the batch's upserts are
// read by workers (relatePrepass) while the loop applies the events, and
// relate takes the result for its object instead of reading it. The
// results are made by the very functions relate calls without them
// (relReadOf), so what is written is the same bytes either way
// (TestRelatePrepassSameBytes).

// relRead is what relate reads from an object's new JSON alone.
type relRead struct {
	err       error // the JSON could not be read (relDoc)
	h         uint64
	kind, uid string
	// extracted: rel, edges (and rkeys) are set; relate extracts them
	// itself otherwise (an update: most keep their header, and need none).
	extracted bool
	rel       relations.Relations
	// extErr is why the relations could not be read; rel is then empty
	// (the object relates to nothing, relate logs it).
	extErr error
	// edges is the E/ value after its header (encodeEdges), selLen the
	// length of the selector's JSON at its end; encErr: not encodable.
	edges  []byte
	selLen int
	encErr error
	// rkeys are the R/ keys of rel.Refs, one each (nil: relate builds
	// them).
	rkeys [][]byte
}

// readHeader reads what an E/ header is made of: the hash of the
// relations' document, kind and uid. It returns the document, valid
// until b's next build.
func (b *relDocBuf) readHeader(rd *relRead, gr schema.GroupResource, obj []byte, spec bool) []byte {
	doc, kind, uid, err := b.build(obj, spec)
	if err != nil {
		rd.err = err
		return nil
	}
	rd.h, rd.kind, rd.uid = relDocHash(gr, doc), kind, uid
	return doc
}

// relDocHash is the hash an E/ header leads with: of the resource and
// the relations' document. xxhash, not FNV-1a: a byte at a time, FNV
// was a sixth of what the read-ahead workers spent on an object. E/
// entries written before 2026-12-07 19:00 have FNV's hash; the first
// update of such an object finds its header changed and rewrites its E/
// entry (its R/ keys stay), once.
func relDocHash(gr schema.GroupResource, doc []byte) uint64 {
	return mix64(fnv1a(fnv1a(fnvOffset, gr.Group)*fnvPrime, gr.Resource)) ^ xxhash.Sum64(doc)
}

// extract reads the relations of doc (the object's document, readHeader's)
// into rd and encodes them; withKeys also builds their R/ keys.
func (rd *relRead) extract(cluster string, gvr schema.GroupVersionResource, ns, name string, doc []byte, withKeys bool) {
	rel, err := relations.Extract(gvr.GroupResource(), ns, doc)
	rd.encode(cluster, gvr, ns, name, rel, err, withKeys)
}

// encode is extract of the relations rel that doc has (err: it has
// none it can say).
func (rd *relRead) encode(cluster string, gvr schema.GroupVersionResource, ns, name string, rel relations.Relations, err error, withKeys bool) {
	rd.extracted = true
	if err != nil {
		rd.extErr, rel = err, relations.Relations{}
	}
	rd.rel = rel
	var sel []byte
	if rd.edges, sel, rd.encErr = encodeRelations(gvr, nil, rel); rd.encErr != nil {
		return
	}
	rd.selLen = len(sel)
	if withKeys {
		// In one buffer: a Pod has five.
		n := 0
		for _, r := range rel.Refs {
			n += reverseKeyLen(cluster, r.Target, gvr, ns, name)
		}
		buf := make([]byte, 0, n)
		rd.rkeys = make([][]byte, len(rel.Refs))
		for i, r := range rel.Refs {
			if unkeyed(gvr, r) {
				continue // none (rewriteEdges)
			}
			start := len(buf)
			buf = appendReverseKey(buf, cluster, r.Target, r.Type, gvr, ns, name)
			rd.rkeys[i] = buf[start:len(buf):len(buf)]
		}
	}
}

// relReadOf is everything relate reads from obj alone: its header, and
// (withEdges) its relations encoded. nil when relate would not read obj
// (its kind is indexed, names nothing in its spec and obj has no owner).
func (s *Store) relReadOf(b *relDocBuf, cluster string, gvr schema.GroupVersionResource, ns, name string, obj []byte, withEdges bool) *relRead {
	gr := gvr.GroupResource()
	spec := relations.HasSpecRelations(gr)
	if _, known := s.kinds.Load(kindSeen{gvr}); known && !spec && !bytes.Contains(obj, ownerRefsMember) {
		return nil
	}
	rd := &relRead{}
	if withEdges && gr == podsGVR.GroupResource() {
		// A Pod's references read in the pass that builds its document
		// (relations.PodScan), the document read again only when the
		// scan cannot say.
		b.scan.Reset(obj, ns)
		doc, kindV, kind, uid, err := b.buildScan(obj, spec, &b.scan)
		if err != nil {
			rd.err = err
			return rd
		}
		rd.h, rd.kind, rd.uid = relDocHash(gr, doc), kind, uid
		if rel, ok := b.scan.Relations(kindV); ok {
			rd.encode(cluster, gvr, ns, name, rel, nil, true)
		} else {
			rd.extract(cluster, gvr, ns, name, doc, true)
		}
		b.scan.Reset(nil, "") // not kept past the object
		return rd
	}
	doc := b.readHeader(rd, gr, obj, spec)
	if rd.err == nil && withEdges {
		rd.extract(cluster, gvr, ns, name, doc, true)
	}
	return rd
}

var ownerRefsMember = []byte(`"ownerReferences"`)

// relPre is one upsert of the batch, read ahead.
type relPre struct {
	gvr      schema.GroupVersionResource
	ns, name string
	obj      []byte
	// claimed by a worker or the loop (0: not yet); done is closed once
	// rd is set.
	claimed atomic.Bool
	done    chan struct{}
	rd      *relRead
}

// objRef names an object's bytes: the event's, the same slice relate
// is given.
type objRef struct {
	p *byte
	n int
}

// relPrepass is a batch's upserts being read ahead (relatePrepass).
type relPrepass struct {
	byObj map[objRef]*relPre // not changed once the workers start
	stop  atomic.Bool
	wg    sync.WaitGroup
}

// relatePrepass starts reading the relations of the batch's upserts on
// GOMAXPROCS-1 workers (at least one), in event order, while the loop applies the events;
// relate takes each result (preRead), or reads the object itself
// when no worker has begun it. An add (the object's key known absent
// when the batch began: absentBefore) is read whole, edges and R/ keys;
// any other upsert only its
// header, which most updates leave as it was: their E/ entries are not
// read at all (the uid entry vouches for the header: relMetaHash), and
// the few whose header changed read theirs on the loop. The returned function
// stops the workers and waits for them; the batch calls it when its loop
// is done (a result not taken is dropped).
func (w *writer) relatePrepass(events []feed.Event) (stop func()) {
	w.relDoc.pre = nil
	if w.s.noRelations {
		return func() {}
	}
	// Sized for the batch: grown entry by entry, both were regrown on
	// the loop before a worker started.
	order := make([]*relPre, 0, len(events))
	byObj := make(map[objRef]*relPre, len(events))
	entries := make([]relPre, len(events)) // one allocation, not one per upsert
	for i := range events {
		ev := events[i].Event
		obj := ev.GetObject()
		if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT || len(obj) == 0 {
			continue
		}
		ref := objRef{&obj[0], len(obj)}
		if _, dup := byObj[ref]; dup {
			continue // relate checks the names: a second event of the same bytes reads them itself
		}
		p := &entries[i]
		p.gvr, p.ns, p.name, p.obj, p.done = stream.GVR(ev.GetGvr()), ev.GetNamespace(), ev.GetName(), obj, make(chan struct{})
		byObj[ref] = p
		order = append(order, p)
	}
	if w.ov.rels == nil && len(order) > 0 {
		// Sized for the batch's upserts, each of which may note its E/
		// entry: grown entry by entry, the map was rehashed at every
		// doubling, on the loop.
		w.ov.rels = make(map[string]relState, len(order))
	}
	if len(order) < 2 {
		return func() {}
	}
	pp := &relPrepass{byObj: byObj}
	var next atomic.Int64
	// One core is the loop's: a worker reads an object in a fraction of
	// the time the loop applies it, so GOMAXPROCS-1 keep ahead of it
	// without taking the loop's core (on two cores, one).
	for range min(max(1, runtime.GOMAXPROCS(0)-1), len(order)) {
		pp.wg.Go(func() {
			var b relDocBuf
			for !pp.stop.Load() {
				i := int(next.Add(1)) - 1
				if i >= len(order) {
					return
				}
				if p := order[i]; p.claimed.CompareAndSwap(false, true) {
					p.rd = w.s.relReadOf(&b, w.cluster, p.gvr, p.ns, p.name, p.obj, w.absentBefore(p.gvr, p.ns, p.name))
					close(p.done)
				}
			}
		})
	}
	w.relDoc.pre = pp
	return func() {
		pp.stop.Store(true)
		pp.wg.Wait()
		w.relDoc.pre = nil
	}
}

// preRead is the read-ahead result for the object at (gvr, ns, name)
// whose new JSON is obj, made now on the loop's goroutine (in w.relDoc)
// when no worker has begun it; nil when the batch has none for it.
func (w *writer) preRead(gvr schema.GroupVersionResource, ns, name string, obj []byte) *relRead {
	pp := w.relDoc.pre
	if pp == nil || len(obj) == 0 {
		return nil
	}
	p := pp.byObj[objRef{&obj[0], len(obj)}]
	if p == nil || p.gvr != gvr || p.ns != ns || p.name != name {
		return nil
	}
	if p.claimed.CompareAndSwap(false, true) {
		p.rd = w.s.relReadOf(&w.relDoc, w.cluster, gvr, ns, name, obj, w.absentBefore(gvr, ns, name))
		close(p.done)
	} else {
		<-p.done
	}
	return p.rd
}

// absentBefore reports whether the object at (gvr, ns, name) was known
// absent when the batch began (an add, read whole ahead): unread as it
// answered before the loop applied anything, from the batch in flight
// and the filter of written keys. This batch's overlay is left out: it
// was empty then, and the loop writes it while the workers call this.
// It was decided on the loop for every upsert before the workers began,
// a microsecond a Pod of the loop's time (its key and the filter's
// lock); the workers decide it now, the same way.
func (w *writer) absentBefore(gvr schema.GroupVersionResource, ns, name string) bool {
	key := objKey(gvr, ns, name, w.cluster)
	if w.prev != nil {
		if st, ok := w.prev.objs[string(key)]; ok {
			return st.gone
		}
	}
	return w.known != nil && !w.known.mayHave(key)
}
