package badger

import (
	"runtime"
	"sync"
	"sync/atomic"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

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
