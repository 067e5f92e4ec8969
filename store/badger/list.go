package badger

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// List returns one page of objects ordered by namespace, name, cluster.
func (r *Reader) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	if !o.AsOf.IsZero() {
		return r.listAsOf(ctx, o)
	}
	if r.noRelations && len(o.Fields.Relations()) > 0 {
		return query.Page{}, errNoRelations
	}
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	l := listScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters), vi: r.vindex}
	// A streamed answer's page fills the object slice and the chunks of
	// the pages it has written (query.Reuse) instead of new ones.
	l.page.Items = o.Reuse.Items()
	defer func() { o.Reuse.KeepItems(l.page.Items) }()
	if err := l.relations(); err != nil {
		return query.Page{}, err
	}
	l.page.Version = p.snap.version.Clone()
	if !l.resolve() {
		return l.page, nil
	}
	l.membersRange()
	start, err := l.start(p.cur.After)
	if err != nil {
		return l.page, err
	}
	scan := l.scan
	if l.members != nil {
		scan = l.scanMembers // a relation field selected the candidates
	}
	if more, err := scan(start); err != nil || !more {
		p.last = err == nil
		return l.page, err
	}
	returned := p.cur.N + int64(len(l.page.Items))
	l.page.Remaining = l.remaining(p.snap, p.cur.After == nil, returned)
	l.page.Continue, err = p.token(l.lastKey, returned)
	return l.page, err
}

// listScan is one List page: the query resolved to a key range of the
// snapshot, and the page the scan of that range fills.
type listScan struct {
	o        query.ListOptions
	txn      *bdg.Txn
	clusters map[string]bool // nil: every cluster
	vi       *valueIndex     // a field equality it keeps is scanned like a label
	sel      labels.Selector
	prefix   []byte
	indexed  bool // prefix is a label index: values are read from the objects
	// implied: the index entry alone proves the selector (its only
	// requirement is the indexed one), so labels are not decoded again.
	implied bool
	// fieldImplied: the value index entry proves the field selector
	// (fieldPrefix), so the objects are not read for it.
	fieldImplied bool
	pending      []candidate // indexed keys waiting for their objects
	// base is the label index's prefix, objBase the resource's object
	// prefix: an index key's object key is objBase + key[len(base):].
	base, objBase []byte
	keys          arena // candidates' keys
	fetchers      []*bdg.Iterator
	clusterNames  map[string]string
	// arenas hold the page's object copies, one per fetch worker (the
	// first also for a scan of the primary range).
	arenas  []arena
	page    query.Page
	lastKey []byte
	// members, when set, are the objects a relation field selector
	// selects (relfilter.go), by memberKey.
	members map[string]bool
	// asOf, when set, is an as-of list's (history_asoflist.go): the
	// objects changed since its time, left to it, and the keys returned.
	asOf *asOfScan
}

// candidate is one key whose object is still to be judged: a label-index
// key (objKey the object's primary key) or a primary key. ns and name are
// set only when a filter needs them.
type candidate struct {
	key, objKey       []byte
	ns, name, cluster string
	matched           bool
	obj               query.Object
	err               error
}

// resolve picks the range to scan; false when the query selects nothing.
func (l *listScan) resolve() bool {
	if l.clusters != nil && len(l.clusters) == 0 {
		return false // an explicit empty cluster list selects nothing
	}
	l.sel = l.o.LabelSelector()
	ns := l.o.Namespace
	if fns, ok := l.o.Fields.Namespace(); ok {
		if ns != "" && ns != fns {
			return false
		}
		ns = fns
	}
	base, indexed := scanPrefix(l.o.GVR, l.sel)
	if reqs, _ := l.sel.Requirements(); indexed && len(reqs) == 1 {
		l.implied = true
	}
	if !indexed {
		base, indexed = l.fieldPrefix(base)
	}
	if !indexed && len(l.clusters) == 1 {
		// One cluster: its own entries, not every cluster's objects. A
		// label-indexed list keeps the label index, which costs the
		// selected objects fleet-wide rather than all of the cluster's.
		for c := range l.clusters {
			base, indexed = clusterPrefix(c, l.o.GVR), true
		}
	}
	l.prefix, l.indexed = base, indexed
	if indexed {
		l.base, l.objBase = base, objPrefix(l.o.GVR)
	}
	if ns != "" {
		l.prefix = append(append(bytes.Clone(base), ns...), sep)
	}
	return true
}

// fieldPrefix is the value index's range of a field equality the
// selector requires, when the index keeps that path for every object: a
// selective field selector then costs its answer, like a label
// selector, not a read of every object. The candidates are still matched
// against the whole selector (matches), so the index only narrows.
func (l *listScan) fieldPrefix(base []byte) ([]byte, bool) {
	gr := l.o.GVR.GroupResource()
	for _, e := range l.o.Fields.Equalities() {
		d := query.Dimension{Kind: query.DimField, Key: e.Path}
		if l.vi.answers(gr, d) {
			// A v/ entry for a value other than "" is the equality itself
			// (an object or array renders no value, so "" is not).
			l.fieldImplied = l.o.Fields.Requirements() == 1 && e.Value != ""
			return append(join("v", l.o.GVR.Group, l.o.GVR.Version, l.o.GVR.Resource, d.IndexName(), e.Value), sep), true
		}
	}
	return base, false
}

// start is the first key a page may return: past the previous page's
// last key, which must lie in this list's range.
func (l *listScan) start(after []byte) ([]byte, error) {
	if after == nil {
		return l.prefix, nil
	}
	if !bytes.HasPrefix(after, l.prefix) {
		return nil, fmt.Errorf("%w: continue token belongs to another list", query.ErrInvalid)
	}
	return append(bytes.Clone(after), sep), nil
}

// scan fills the page from start; true when a match beyond a full page
// proves there is a next one.
//
// Values are read in place (Item.Value on an item not prefetched: the
// value log's bytes, copied once, into the page's arena), as the search
// reads them: a prefetching iterator starts a goroutine per item and
// copies each value into the item's buffer, which grows anew whenever a
// larger value comes, so a list made a second copy of nearly every
// object it read (BenchmarkReads/List/paged500: 34 MB per op on 6,000
// Pods; read in place 24 MB, and 2 MB reusing a streamed answer's memory,
// BenchmarkReads/List/paged500reused).
func (l *listScan) scan(start []byte) (bool, error) {
	it := l.txn.NewIterator(bdg.IteratorOptions{Prefix: l.prefix, PrefetchValues: false})
	defer it.Close()
	defer l.closeFetchers()
	for it.Seek(start); it.Valid(); it.Next() {
		if more, err := l.visit(it.Item()); err != nil || more {
			return more, err
		}
	}
	return l.drain()
}

// visit filters one key, cheapest tests first, and adds its object.
func (l *listScan) visit(item *bdg.Item) (more bool, err error) {
	return l.visitKey(item.Key(), item)
}

// visitKey is visit of key, whose item is read only when the list is not
// indexed (nil: it is; the object is read by drain).
func (l *listScan) visitKey(key []byte, item *bdg.Item) (more bool, err error) {
	nsb, nameb, cb, err := tailBytes(key)
	if err != nil {
		return false, err
	}
	if l.clusters != nil && !l.clusters[string(cb)] {
		return false, nil
	}
	if l.asOf != nil && l.asOf.changed[string(keyTail(key, nsb, nameb, cb))] {
		return false, nil
	}
	c := candidate{cluster: l.intern(cb)}
	if l.o.Visible != nil || l.o.Fields != nil {
		c.ns, c.name = string(nsb), string(nameb)
	}
	// Before the limit: a hidden object neither fills the page nor
	// becomes the cursor's position.
	if l.o.Visible != nil && !l.o.Visible.Allows(l.o.GVR.GroupResource(), c.cluster, c.ns) {
		return false, nil
	}
	if l.members != nil && !l.members[memberKey(c.cluster, c.ns, c.name)] {
		return false, nil
	}
	if l.o.Fields != nil && !l.o.Fields.NeedsObject() {
		if ok, _ := l.o.Fields.Matches(c.ns, c.name, nil); !ok {
			return false, nil
		}
	}
	if l.indexed {
		// The object's primary key is the index key's namespace, name
		// and cluster after the resource's object prefix.
		c.key = l.keys.clone(key)
		c.objKey = l.keys.concat(l.objBase, key[len(l.base):])
		l.pending = append(l.pending, c)
		if len(l.pending) < l.batch() {
			return false, nil
		}
		return l.drain()
	}
	if l.o.Limit > 0 && int64(len(l.page.Items)) == l.o.Limit {
		// Only a matching object proves there is a next page.
		return l.matches(item, &c, nil, nil)
	}
	if len(l.arenas) == 0 {
		l.growArenas(1)
	}
	var obj query.Object
	if ok, err := l.matches(item, &c, &obj, &l.arenas[0]); err != nil || !ok {
		return false, err
	}
	l.page.Items = append(l.page.Items, obj)
	l.lastKey = item.KeyCopy(l.lastKey[:0])
	if l.asOf != nil {
		l.asOf.returned(l.lastKey)
	}
	return false, nil
}

// fetchBatch bounds the label-index keys whose objects are read together:
// enough to keep every core busy, few enough that a short page reads
// little beyond its end.
const fetchBatch = 256

// batch is how many pending candidates are read together: no more than
// can still be returned (plus the one that proves a next page) when the
// index alone decides a match.
func (l *listScan) batch() int {
	decided := (l.implied && (l.o.Fields == nil || !l.o.Fields.NeedsObject())) || (l.fieldImplied && l.sel.Empty())
	if l.o.Limit > 0 && decided {
		return int(min(int64(fetchBatch), l.o.Limit-int64(len(l.page.Items))+1))
	}
	return fetchBatch
}

// drain reads the pending candidates' objects, in parallel because each is
// a point lookup in the LSM tree and the value log (most of a selective
// list's time), then adds the matches in key order; true when a match
// beyond a full page proves there is a next one.
func (l *listScan) drain() (bool, error) {
	cs := l.pending
	l.pending = l.pending[:0]
	if len(cs) == 0 {
		return false, nil
	}
	workers := min(runtime.GOMAXPROCS(0), maxFetchWorkers, (len(cs)+15)/16)
	l.growArenas(workers)
	var wg sync.WaitGroup
	for w := range workers {
		it := l.fetcher(w)
		wg.Go(func() {
			// Contiguous shares: a read-only transaction is safe for
			// concurrent reads, and each worker writes only its own slots.
			// Each worker's iterator seeks its candidates in key order: a
			// fifth cheaper than a point Get each, which takes and drops a
			// reference on every table it consults and checks their bloom
			// filters, two workers contending for the same counters.
			for i := w * len(cs) / workers; i < (w+1)*len(cs)/workers; i++ {
				c := &cs[i]
				if it.Seek(c.objKey); !it.Valid() || !bytes.Equal(it.Item().Key(), c.objKey) {
					if l.members != nil {
						// A relation's member at another version of the
						// resource than the list's: not in this list.
						continue
					}
					ns, name, cluster, _ := tail(c.key)
					c.err = fmt.Errorf("index points at a missing object %s/%s in %s: %w", ns, name, cluster, errCorrupt)
					continue
				}
				c.matched, c.err = l.matches(it.Item(), c, &c.obj, &l.arenas[w])
			}
		})
	}
	wg.Wait()
	for i := range cs {
		c := &cs[i]
		if c.err != nil {
			return false, c.err
		}
		if !c.matched {
			continue
		}
		if l.o.Limit > 0 && int64(len(l.page.Items)) == l.o.Limit {
			return true, nil // only a matching object proves a next page
		}
		l.page.Items = append(l.page.Items, c.obj)
		l.lastKey = c.key
		if l.asOf != nil {
			l.asOf.returned(c.key)
		}
	}
	return false, nil
}

// growArenas makes n object arenas at least, lending from the list's
// Reuse when it has one.
func (l *listScan) growArenas(n int) {
	for len(l.arenas) < n {
		l.arenas = append(l.arenas, arena{from: l.o.Reuse})
	}
}

// fetcher is fetch worker w's iterator over the resource's objects, kept
// for the scan (closeFetchers).
func (l *listScan) fetcher(w int) *bdg.Iterator {
	for len(l.fetchers) <= w {
		l.fetchers = append(l.fetchers, l.txn.NewIterator(bdg.IteratorOptions{Prefix: l.objBase}))
	}
	return l.fetchers[w]
}

func (l *listScan) closeFetchers() {
	for _, it := range l.fetchers {
		it.Close()
	}
	l.fetchers = nil
}

// maxFetchWorkers caps drain's parallelism: past a few cores one list
// would only crowd out the others.
const maxFetchWorkers = 4

// matches decodes and filters one candidate, item its object; obj
// receives it, copied into ar, when non-nil.
func (l *listScan) matches(item *bdg.Item, c *candidate, obj *query.Object, ar *arena) (bool, error) {
	o, sel := l.o, l.sel
	check := !sel.Empty() && !l.implied
	matched := false
	err := item.Value(func(b []byte) error {
		rec, err := decodeRecord(b, check)
		if err != nil {
			return err
		}
		if check && !sel.Matches(labels.Set(rec.labels)) {
			return nil
		}
		if o.Fields.NeedsObject() && !l.fieldImplied {
			ok, err := o.Fields.Matches(c.ns, c.name, rec.json)
			if err != nil || !ok {
				return err
			}
		}
		matched = true
		if obj != nil {
			*obj = query.Object{Cluster: c.cluster, GVR: o.GVR, JSON: ar.clone(rec.json), Cells: ar.clone(rec.cells), Row: rec.row, Checked: true}
		}
		return nil
	})
	return matched, err
}

// intern returns the cluster name b as a string, one per cluster: a page's
// objects share it.
func (l *listScan) intern(b []byte) string {
	if s, ok := l.clusterNames[string(b)]; ok {
		return s
	}
	if l.clusterNames == nil {
		l.clusterNames = map[string]string{}
	}
	s := string(b)
	l.clusterNames[s] = s
	return s
}

// arena copies a page's objects into shared chunks, growing from 8 KiB to
// 256 KiB: a list made an allocation per object for its copies, now one
// per chunk (measured: docs/benchmarks/query.md#every-target-met-2026-12-01-1157-utc).
// A chunk lives as long as any object in it, which is as long as
// the page. The zero value is ready.
type arena struct {
	buf  []byte
	next int
	// from, when set, lends the chunks (ListOptions.Reuse), all of
	// arenaMost.
	from *query.Reuse
}

// Chunks grow from arenaFirst to arenaMost; a copy over a quarter of
// arenaMost gets its own allocation.
const arenaFirst, arenaMost = 8 << 10, query.ReuseChunk

func (a *arena) clone(b []byte) []byte { return a.concat(b, nil) }

// concat copies x followed by y.
func (a *arena) concat(x, y []byte) []byte {
	n := len(x) + len(y)
	if n > arenaMost/4 {
		return append(append(make([]byte, 0, n), x...), y...)
	}
	if cap(a.buf)-len(a.buf) < n {
		if a.from != nil {
			a.buf = a.from.Chunk()
		} else {
			a.next = min(max(a.next*2, arenaFirst), arenaMost)
			a.buf = make([]byte, 0, a.next)
		}
	}
	start := len(a.buf)
	a.buf = append(append(a.buf, x...), y...)
	return a.buf[start:len(a.buf):len(a.buf)] // full: appending copies, never overwrites a neighbour
}

// remaining is the count after this page when it is exact and cheap: with
// no selector the first page counts the range once for the whole list.
func (l *listScan) remaining(snap *snapshot, first bool, returned int64) *int64 {
	if snap.total < 0 && first && l.sel.Empty() && l.o.Fields == nil {
		snap.total = countKeys(l.txn, l.prefix, l.clusters, l.visible)
	}
	if snap.total < 0 {
		return nil
	}
	rem := max(snap.total-returned, 0)
	return &rem
}

// visible reports whether the caller may see the object at key (the
// remaining count must not reveal how many objects are hidden).
func (l *listScan) visible(key []byte) bool {
	if l.o.Visible == nil {
		return true
	}
	ns, _, cluster, err := tail(key)
	return err == nil && l.o.Visible.Allows(l.o.GVR.GroupResource(), cluster, ns)
}

func countKeys(txn *bdg.Txn, prefix []byte, clusters map[string]bool, visible func([]byte) bool) int64 {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	var n int64
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if clusters != nil {
			if !clusters[string(k[bytes.LastIndexByte(k, sep)+1:])] {
				continue
			}
		}
		if !visible(k) {
			continue
		}
		n++
	}
	return n
}

// scanPrefix picks the label index when the selector has an equality
// requirement, else the resource's primary range.
func scanPrefix(gvr schema.GroupVersionResource, sel labels.Selector) ([]byte, bool) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
		case selection.In:
			if r.Values().Len() != 1 {
				continue
			}
		default:
			continue
		}
		vals := r.Values().List()
		sort.Strings(vals)
		return labelPrefix(gvr, r.Key(), vals[0]), true
	}
	return objPrefix(gvr), false
}
