package badger

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// asOfScan is what an as-of list tells the List scan it runs (list.go):
// the objects changed since the as-of time, which the scan leaves out
// because their current record is not their state then, and the keys of
// the objects the scan returned, for the merge with those rebuilt. Keys
// are tails: namespace, name and cluster, \x00-separated, the end of
// every object's key in o/, l/, v/ and p/ alike.
type asOfScan struct {
	changed map[string]bool
	tails   [][]byte
}

// returned records the tail of a key the scan returned.
func (a *asOfScan) returned(key []byte) {
	ns, name, cluster, _ := tailBytes(key) // parsed before: it has a tail
	a.tails = append(a.tails, bytes.Clone(keyTail(key, ns, name, cluster)))
}

// keyTail is the namespace, name and cluster at the end of key, which
// tailBytes found as ns, name and cluster.
func keyTail(key, ns, name, cluster []byte) []byte {
	return key[len(key)-len(ns)-len(name)-len(cluster)-2:]
}

// listAsOf is List at o.AsOf. An object whose resource's change index
// (H/, history_changed.go) holds no change after the as-of time is what
// its current record says: those are read by List's own scan (its label,
// value or cluster index, its parallel reads, the record's labels), so an
// as-of list costs today's list plus one pass over the resource's changes
// made since (not the fleet's), and a rebuild of each object those
// changes name: deleted since (its last state), changed since (its state
// then, from its revisions), created since (left out). The two sequences
// are merged in key order. Every revision after the window's start has
// its H/ entry (retention removes it with the change, oldest first, and
// moves the start past them), so the index misses no change after an
// as-of time in the window.
//
// Its pages are read from the Badger read transaction of the first page,
// like a List's (page.go): every page sees the same state, whatever the
// materializer and retention write meanwhile (the window is checked on
// the first page: the snapshot keeps what retention removes later). The
// cursor carries the as-of time beside the snapshot and the last
// object's key (o/); the snapshot carries the changed set the first page
// read (the same snapshot gives the same set), so a later page reads no
// change index.
func (r *Reader) listAsOf(ctx context.Context, o query.ListOptions) (query.Page, error) {
	t := o.AsOf.UnixNano()
	if rfs := o.Fields.Relations(); len(rfs) > 0 {
		return query.Page{}, fmt.Errorf("%w: field selector %s: relation fields are answered for now, not as of a past time", query.ErrInvalid, rfs[0].Field)
	}
	if o.Continue == "" {
		if err := r.inWindow(ctx, o.AsOf); err != nil {
			return query.Page{}, err
		}
	}
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	if o.Continue != "" && p.cur.AsOf != t {
		return query.Page{}, fmt.Errorf("%w: continue: the token belongs to an as-of list of another time", query.ErrInvalid)
	}
	p.cur.AsOf = t
	objBase := objPrefix(o.GVR)
	prefix := objBase
	if o.Namespace != "" {
		prefix = append(append(bytes.Clone(prefix), o.Namespace...), sep)
	}
	var after []byte // the previous page's last tail
	if a := p.cur.After; a != nil {
		if !bytes.HasPrefix(a, prefix) {
			return query.Page{}, fmt.Errorf("%w: continue token belongs to another list", query.ErrInvalid)
		}
		after = a[len(objBase):]
	}
	l := listScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters), vi: r.vindex}
	l.page.Version = p.snap.version.Clone()
	if !l.resolve() {
		p.last = true
		return l.page, nil
	}
	cs, err := changedAfter(ctx, p.snap, o, l.clusters, t)
	if err != nil {
		return query.Page{}, err
	}
	changed := cs.after(after)
	l.asOf = &asOfScan{changed: cs.set}
	start := l.prefix
	if after != nil {
		base := objBase
		if l.indexed {
			base = l.base
		}
		if s := append(append(bytes.Clone(base), after...), sep); bytes.Compare(s, start) > 0 {
			start = s
		}
	}
	more, err := l.scan(start)
	if err != nil {
		return query.Page{}, err
	}
	kept := l.page.Items
	m := asOfMerge{o: o, txn: p.snap.txn, t: t, sel: l.sel, changed: changed, clusters: l.clusters, need: len(changed)}
	if more && len(kept) > 0 {
		last := l.asOf.tails[len(kept)-1]
		m.need, _ = slices.BinarySearchFunc(changed, last, bytes.Compare)
	}
	defer m.close()
	// Room for every changed object the page may take: with every object
	// changed since, the page is nearly all of them, and growing it by
	// doubling copied it about twice.
	room := len(kept) + min(len(changed), m.need+1)
	if o.Limit > 0 {
		room = min(room, int(o.Limit))
	}
	page := query.Page{Version: l.page.Version, Items: make([]query.Object, 0, room)}
	var lastTail []byte
	for i := 0; ; {
		room := 0
		if o.Limit > 0 {
			room = int(o.Limit) - len(page.Items) + 1
		}
		next, err := m.peek(room)
		if err != nil {
			return query.Page{}, err
		}
		fromScan := i < len(kept)
		if o.Limit > 0 && int64(len(page.Items)) == o.Limit {
			if !fromScan && next == nil && !more {
				p.last = true
				return page, nil
			}
			break // only a match proves a next page
		}
		if !fromScan && next == nil {
			p.last = true
			return page, nil
		}
		if fromScan && (next == nil || bytes.Compare(l.asOf.tails[i], next.tail) < 0) {
			page.Items, lastTail = append(page.Items, kept[i]), l.asOf.tails[i]
			i++
			continue
		}
		page.Items, lastTail = append(page.Items, next.obj), next.tail
		m.next = nil
	}
	returned := p.cur.N + int64(len(page.Items))
	page.Continue, err = p.token(append(bytes.Clone(objBase), lastTail...), returned)
	return page, err
}

// asOfMerge yields, in key order, the objects changed since the as-of
// time that were in the list then, each as it was.
type asOfMerge struct {
	o        query.ListOptions
	txn      *bdg.Txn
	t        int64
	sel      labels.Selector
	clusters map[string]bool
	changed  [][]byte  // tails still to judge
	judged   []rebuilt // judged, in order; one not ok did not match
	next     *rebuilt
	// lax turns off the selector's pre-check (objectAt): it costs a
	// point read per object and saves a rebuild, several reads and
	// patches, per object it leaves out, so it pays unless nearly every
	// changed object matches (BenchmarkHistoryAsOfList: with half
	// selected the pre-check halves the CPU). Each batch's answer
	// decides the next batch's.
	lax bool
	// iters are the workers' iterators, made on the first batch and kept
	// for the page's later ones (close): making one costs about as much
	// as a few objects' rebuilds.
	iters []*histIters
	// need bounds how many of changed the page may still take: those
	// before the scan's last object when the scan filled the page (the
	// page ends there at the latest), else all.
	need int
}

func (m *asOfMerge) close() {
	for _, h := range m.iters {
		h.close()
	}
	m.iters = nil
}

// rebuilt is a changed object judged: obj when ok (held here, not
// allocated one by one: a churned list's are thousands).
type rebuilt struct {
	tail []byte
	obj  query.Object
	ok   bool
	err  error
}

// judgeBatch bounds the changed objects rebuilt together with the
// selector's pre-check, and the first batch: each is a few reads of its
// revisions (most of a churned list's time), so they are read in
// parallel like List's candidates (drain), and a short page rebuilds
// little beyond its end. A batch read from the records (judgeByRecord)
// takes every changed object the page may still need, up to the room
// left in it and maxJudgeBatch (a bound on the revisions it holds):
// its reads go in key and uid order and step from one object to the next
// instead of seeking where the batch is dense among the resource's keys
// (a long list of a churned resource), which a batch of all it needs is
// as far as the page allows.
const judgeBatch, maxJudgeBatch = 64, 1 << 14

// peek is the next match, nil when none is left; room is how many more
// the page takes (0: no bound).
func (m *asOfMerge) peek(room int) (*rebuilt, error) {
	for m.next == nil {
		if len(m.judged) == 0 {
			if len(m.changed) == 0 {
				return nil, nil
			}
			m.judgeSome(room)
		}
		j := &m.judged[0]
		m.judged = m.judged[1:]
		if j.err != nil {
			return nil, j.err
		}
		if j.ok {
			m.next = j
		}
	}
	return m.next, nil
}

// judgeSome judges the next batch of changed tails, room the page's
// (peek).
func (m *asOfMerge) judgeSome(room int) {
	byRecord := m.lax || m.sel == nil || m.sel.Empty()
	n := judgeBatch
	if byRecord {
		n = min(m.need, maxJudgeBatch)
		if room > 0 {
			n = min(n, room)
		}
		n = max(n, judgeBatch)
	}
	n = min(n, len(m.changed))
	m.need = max(m.need-n, 0)
	out := make([]rebuilt, n)
	for i := range out {
		out[i].tail = m.changed[i]
	}
	m.changed = m.changed[n:]
	workers := min(runtime.GOMAXPROCS(0), maxFetchWorkers, (n+7)/8)
	for len(m.iters) < workers {
		m.iters = append(m.iters, newHistIters(m.txn))
	}
	if byRecord {
		m.judgeByRecord(out, workers)
	} else {
		// Objects are taken one at a time, not in equal shares: their
		// costs differ (a selector's pre-check may spare a rebuild), and
		// a batch waits for its slowest worker.
		var taken atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				// A read-only transaction is safe for concurrent reads;
				// each worker writes only the slots it took, through its
				// own iterators.
				h := m.iters[w]
				for i := int(taken.Add(1)) - 1; i < n; i = int(taken.Add(1)) - 1 {
					out[i].obj, out[i].ok, out[i].err = m.judge(h, m.sel, out[i].tail)
				}
			})
		}
		wg.Wait()
	}
	m.judged = out
	matched := 0
	for _, j := range out {
		if j.ok {
			matched++
		}
	}
	m.lax = 16*matched > 15*n
}

// judge is the object at tail as it was at the as-of time when it was
// there, the caller may see it and it matches the selectors; sel, when
// set, is pre-checked before a rebuild (objectAt).
func (m *asOfMerge) judge(h *histIters, sel labels.Selector, tl []byte) (query.Object, bool, error) {
	ns, name, cluster, ok, err := m.admits(h, tl)
	if err != nil || !ok {
		return query.Object{}, false, err
	}
	return m.fromHistory(h, sel, ns, name, cluster)
}

// admits parses tail and judges what its key alone decides: the list's
// clusters, the caller's visibility, a field selector on the name. Its
// namespace and cluster are h's interned strings.
func (m *asOfMerge) admits(h *histIters, tl []byte) (ns, name, cluster string, ok bool, err error) {
	o := m.o
	// A tail is a key's end from its namespace on: tailBytes reads it as
	// it reads the whole key (no object prefix made and joined per
	// object).
	nsb, nameb, cb, err := tailBytes(tl)
	if err != nil {
		return "", "", "", false, err
	}
	ns, name, cluster = h.intern(nsb), string(nameb), h.intern(cb)
	if m.clusters != nil && !m.clusters[cluster] || !o.Visible.Allows(o.GVR.GroupResource(), cluster, ns) {
		return "", "", "", false, nil
	}
	if o.Fields != nil && !o.Fields.NeedsObject() {
		if ok, err := o.Fields.Matches(ns, name, nil); err != nil || !ok {
			return "", "", "", false, err
		}
	}
	return ns, name, cluster, true, nil
}

// fromHistory is the object (ns, name, cluster) at the as-of time read
// from the name's revisions (objectAt), sel pre-checked when set, and
// matched.
func (m *asOfMerge) fromHistory(h *histIters, sel labels.Selector, ns, name, cluster string) (query.Object, bool, error) {
	obj, cells, err := objectAt(m.txn, h, cluster, m.o.GVR, ns, name, m.t, sel)
	if err != nil || obj == nil {
		return query.Object{}, false, err
	}
	var lbls map[string]string
	if !m.sel.Empty() {
		if lbls, err = rawjson.CheckedLabels(obj); err != nil { // the store's own JSON, checked when stored
			return query.Object{}, false, err
		}
	}
	return m.matched(ns, name, cluster, obj, cells, lbls)
}

// matched is the object when it matches the list's selectors (lbls its
// labels, read when the list has a label selector); ok is false when it
// does not.
func (m *asOfMerge) matched(ns, name, cluster string, obj, cells []byte, lbls map[string]string) (query.Object, bool, error) {
	if !m.sel.Empty() && !m.sel.Matches(labels.Set(lbls)) {
		return query.Object{}, false, nil
	}
	return m.matchedFields(ns, name, cluster, obj, cells)
}

// matchedFields is matched for an object whose labels are known to
// match the list's label selector.
func (m *asOfMerge) matchedFields(ns, name, cluster string, obj, cells []byte) (query.Object, bool, error) {
	if ok, err := m.o.Fields.Matches(ns, name, obj); err != nil || !ok {
		return query.Object{}, false, err
	}
	return query.Object{Cluster: cluster, GVR: m.o.GVR, JSON: obj, Cells: cells, Checked: true}, true, nil
}

// recordJob is one changed object on judgeByRecord's way.
type recordJob struct {
	slot              int  // in the batch
	skip              bool // not in the list by its key (admits), or failed
	ns, name, cluster string
	seq               uint64 // the event that wrote its record
	uid               string
	// order is the uid's revision prefix (r/): the revisions' order; nil
	// when the record does not name the uid (none, or no uid read), and
	// the name's revisions answer (objectAt).
	order []byte
	// at and newest are the uid's revisions at the as-of time
	// (revisionsUnder), set when the record answers (recordAnswers).
	at     []seqRev
	newest bool
}

// judgeByRecord judges out's tails from their records first (fromRecord,
// objectAt when the record cannot answer), in three passes over equal
// shares of the batch: the records' uids read in key order, then each
// object's revisions in the order of its uid (r/ keys are by uid), then
// each object rebuilt from its record read again in key order. Each
// worker's seekers only move forward: where the batch is dense among
// the resource's objects and revisions (a list of a resource that every
// object changed), the next one is a few Next away, not a seek in every
// table (BenchmarkHistoryAsOfListFlushed). The record is read in place
// twice rather than copied once and read back in uid order: the copies
// were a second record's worth of garbage per object, read back from
// memory out of order.
func (m *asOfMerge) judgeByRecord(out []rebuilt, workers int) {
	// One job per tail, judged by its key in the records' pass (admits:
	// about 0.2 µs an object, on the workers rather than before them).
	jobs := make([]recordJob, len(out))
	g := m.o.GVR
	objBase := objPrefix(g)
	wantLabels := !m.sel.Empty()
	// Each worker sorts its share's jobs by uid (sorted[w]), merged after:
	// a sort of the whole batch was a few milliseconds of a churned list
	// on one core while the other waited.
	sorted := make([][]*recordJob, workers)
	inShares(len(jobs), workers, func(w, lo, hi int) {
		defer func() {
			mine := make([]*recordJob, 0, hi-lo)
			for i := lo; i < hi; i++ {
				if !jobs[i].skip {
					mine = append(mine, &jobs[i])
				}
			}
			slices.SortFunc(mine, byOrder)
			sorted[w] = mine
		}()
		s := m.iters[w].objSeeker(m.txn, objBase)
		var key []byte
		var base []byte // revBase of baseOf
		baseOf := ""
		for i := lo; i < hi; i++ {
			j := &jobs[i]
			j.slot = i
			ns, name, cluster, ok, err := m.admits(m.iters[w], out[i].tail)
			if out[i].err = err; !ok {
				j.skip = true
				continue
			}
			j.ns, j.name, j.cluster = ns, name, cluster
			key = append(append(key[:0], objBase...), out[i].tail...)
			item := s.item(key)
			if item == nil {
				continue
			}
			err = item.Value(func(v []byte) error {
				r, err := decodeRecord(v, false)
				if err != nil {
					return err
				}
				j.seq = r.seq
				if uid, ok := recordUID(r); ok {
					if base == nil || baseOf != j.cluster {
						base, baseOf = revBase(j.cluster, g), j.cluster
					}
					j.uid, j.order = uid, revPrefixIn(base, uid)
				}
				return nil
			})
			if err != nil {
				out[i].err, j.skip = err, true
			}
		}
	})
	byUID := mergeSorted(sorted, byOrder)
	inShares(len(byUID), workers, func(w, lo, hi int) {
		h := m.iters[w]
		for _, j := range byUID[lo:hi] {
			o := &out[j.slot]
			if j.order != nil {
				at, newest, err := h.revisionsUnder(h.textRevPrefix(j.cluster, g, j.uid), j.order, m.t, nil)
				if err != nil || recordAnswers(at, newest, j.seq) {
					o.err, j.at, j.newest = err, at, newest
					continue
				}
			}
			j.skip = true
			o.obj, o.ok, o.err = m.fromHistory(h, nil, j.ns, j.name, j.cluster)
		}
	})
	inShares(len(jobs), workers, func(w, lo, hi int) {
		s := m.iters[w].objSeeker(m.txn, objBase)
		var key []byte
		var then labelsThen // its edits reused from one object to the next
		for i := lo; i < hi; i++ {
			j, o := &jobs[i], &out[i]
			if j.skip || j.at == nil || o.err != nil {
				continue
			}
			key = append(append(key[:0], objBase...), o.tail...)
			item := s.item(key)
			if item == nil {
				o.err = fmt.Errorf("as-of list: the record of %s/%s in %s left the snapshot between two reads: %w", j.ns, j.name, j.cluster, errCorrupt)
				continue
			}
			o.err = item.Value(func(v []byte) error {
				r, err := decodeRecord(v, false)
				if err != nil {
					return err
				}
				if r.seq != j.seq {
					return fmt.Errorf("as-of list: the record of %s/%s in %s changed in the snapshot between two reads: %w", j.ns, j.name, j.cluster, errCorrupt)
				}
				// The selector is matched on the labels then as the
				// record's encoded labels and the reverse patches' label
				// edits tell them, before a rebuild and without a map; an
				// object it leaves out is not rebuilt. When they cannot
				// tell (a state kept whole on the way back), the labels
				// are decoded and the rebuilt state's read (fromRecordAt).
				labelsRead := wantLabels
				if wantLabels && j.newest {
					raw, err := recordLabels(v)
					if err != nil {
						return err
					}
					if then.set(raw, j.at) {
						if !m.sel.Matches(&then) {
							return nil
						}
						labelsRead = false
					}
				}
				if labelsRead && j.newest { // labelsBefore edits them
					if r.labels, _, err = cutLabels(v[8:], true); err != nil {
						return err
					}
				}
				// The record's bytes are valid during the read only: what
				// is returned of them is copied; its labels are decoded
				// for this object, its own.
				obj, cells, lbls, err := fromRecordAt(m.txn, &m.iters[w].ar, r, j.uid, j.cluster, g, j.at, j.newest, labelsRead, false, true)
				if err != nil {
					return err
				}
				if labelsRead {
					o.obj, o.ok, err = m.matched(j.ns, j.name, j.cluster, obj, cells, lbls)
				} else {
					o.obj, o.ok, err = m.matchedFields(j.ns, j.name, j.cluster, obj, cells)
				}
				return err
			})
		}
	})
}

func byOrder(a, b *recordJob) int { return bytes.Compare(a.order, b.order) }

// mergeSorted is the sorted lists merged into one sorted by cmp.
func mergeSorted[T any](lists [][]T, cmp func(a, b T) int) []T {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]T, 0, n)
	for len(out) < n {
		least := -1
		for i, l := range lists {
			if len(l) > 0 && (least < 0 || cmp(l[0], lists[least][0]) < 0) {
				least = i
			}
		}
		out = append(out, lists[least][0])
		lists[least] = lists[least][1:]
	}
	return out
}

// inShares calls f on workers goroutines, each with its own contiguous
// share [lo, hi) of n, and waits for them.
func inShares(n, workers int, f func(w, lo, hi int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { f(w, w*n/workers, (w+1)*n/workers) })
	}
	wg.Wait()
}
