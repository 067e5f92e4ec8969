package badger

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
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
	m := asOfMerge{o: o, txn: p.snap.txn, t: t, sel: l.sel, changed: changed, clusters: l.clusters}
	defer m.close()
	page := query.Page{Version: l.page.Version, Items: make([]query.Object, 0, len(kept)+min(len(changed), 64))}
	var lastTail []byte
	for i := 0; ; {
		next, err := m.peek()
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
		page.Items, lastTail = append(page.Items, *next.obj), next.tail
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
	judged   []rebuilt // judged, in order; a nil obj did not match
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
}

func (m *asOfMerge) close() {
	for _, h := range m.iters {
		h.close()
	}
	m.iters = nil
}

type rebuilt struct {
	tail []byte
	obj  *query.Object
	err  error
}

// judgeBatch bounds the changed objects rebuilt together: each is a few
// point reads of its revisions (most of a churned list's time), so they
// are read in parallel like List's candidates (drain), and a short page
// rebuilds little beyond its end.
const judgeBatch = 64

// peek is the next match, nil when none is left.
func (m *asOfMerge) peek() (*rebuilt, error) {
	for m.next == nil {
		if len(m.judged) == 0 {
			if len(m.changed) == 0 {
				return nil, nil
			}
			m.judgeSome()
		}
		j := &m.judged[0]
		m.judged = m.judged[1:]
		if j.err != nil {
			return nil, j.err
		}
		if j.obj != nil {
			m.next = j
		}
	}
	return m.next, nil
}

// judgeSome judges the next batch of changed tails.
func (m *asOfMerge) judgeSome() {
	n := min(len(m.changed), judgeBatch)
	out := make([]rebuilt, n)
	for i := range out {
		out[i].tail = m.changed[i]
	}
	m.changed = m.changed[n:]
	workers := min(runtime.GOMAXPROCS(0), maxFetchWorkers, (n+7)/8)
	for len(m.iters) < workers {
		m.iters = append(m.iters, newHistIters(m.txn))
	}
	sel := m.sel
	if m.lax {
		sel = nil
	}
	// Objects are taken one at a time, not in equal shares: their costs
	// differ (revisions to read and patch, a record or none), and a batch
	// waits for its slowest worker.
	var taken atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// A read-only transaction is safe for concurrent reads; each
			// worker writes only the slots it took, through its own
			// iterators.
			h := m.iters[w]
			for i := int(taken.Add(1)) - 1; i < n; i = int(taken.Add(1)) - 1 {
				out[i].obj, out[i].err = m.judge(h, sel, out[i].tail)
			}
		})
	}
	wg.Wait()
	m.judged = out
	matched := 0
	for _, j := range out {
		if j.obj != nil {
			matched++
		}
	}
	m.lax = 16*matched > 15*n
}

// judge is the object at tail as it was at the as-of time when it was
// there, the caller may see it and it matches the selectors; sel, when
// set, is pre-checked before a rebuild (objectAt), else the object's
// record is read first (recordAt).
func (m *asOfMerge) judge(h *histIters, sel labels.Selector, tl []byte) (*query.Object, error) {
	o := m.o
	ns, name, cluster, err := tail(append(objPrefix(o.GVR), tl...))
	if err != nil {
		return nil, err
	}
	if m.clusters != nil && !m.clusters[cluster] || !o.Visible.Allows(o.GVR.GroupResource(), cluster, ns) {
		return nil, nil
	}
	if o.Fields != nil && !o.Fields.NeedsObject() {
		if ok, err := o.Fields.Matches(ns, name, nil); err != nil || !ok {
			return nil, err
		}
	}
	var obj, cells []byte
	var lbls map[string]string
	found := false
	if sel == nil || sel.Empty() {
		// No pre-check to make: the record first (recordAt).
		if obj, cells, lbls, found, err = recordAt(m.txn, h, objKey(o.GVR, ns, name, cluster), cluster, o.GVR, m.t, !m.sel.Empty()); err != nil {
			return nil, err
		}
	}
	if !found {
		if obj, cells, err = objectAt(m.txn, h, cluster, o.GVR, ns, name, m.t, sel); err != nil || obj == nil {
			return nil, err
		}
		if !m.sel.Empty() {
			if lbls, err = rawjson.CheckedLabels(obj); err != nil { // the store's own JSON, checked when stored
				return nil, err
			}
		}
	}
	if !m.sel.Empty() && !m.sel.Matches(labels.Set(lbls)) {
		return nil, nil
	}
	if ok, err := o.Fields.Matches(ns, name, obj); err != nil || !ok {
		return nil, err
	}
	return &query.Object{Cluster: cluster, GVR: o.GVR, JSON: obj, Cells: cells, Checked: true}, nil
}
