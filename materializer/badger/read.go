package badger

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions() (query.Version, error) {
	v := query.Version{}
	err := s.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
}

func versions(txn *bdg.Txn, v query.Version) error {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: ckptPrefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		cluster := string(it.Item().Key()[len(ckptPrefix):])
		if err := it.Item().Value(func(b []byte) error {
			if len(b) != 8 {
				return errCorrupt
			}
			v[cluster] = binary.BigEndian.Uint64(b)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ReaderOptions bound the list snapshots a Reader keeps.
type ReaderOptions struct {
	// SnapshotTTL is how long the continue tokens of one list stay valid
	// (Kubernetes: until etcd compacts, about 5 minutes). Later pages are
	// ErrExpired.
	SnapshotTTL time.Duration
	// MaxSnapshots bounds the open snapshots. When a new list needs one
	// and all are taken, the oldest snapshot of the client holding the
	// most is dropped (its tokens expire early), so a client paging
	// within its fair share is never the one evicted.
	MaxSnapshots int
	// MaxSnapshotsPerClient bounds the snapshots one client (ListOptions.
	// Client) holds: its next list drops its own oldest, never another
	// client's, so one client's paging cannot expire everyone's continue
	// tokens. 0: no quota of its own (MaxSnapshots still applies).
	MaxSnapshotsPerClient int
}

// Reader is the Badger read path: Get, List with snapshot-pinned paging,
// and Search. Every page of a list is read from the Badger read transaction
// of its first page, held open until the snapshot expires, so a paged list
// is one consistent cut of the store even while the materializer writes
// (Badger keeps the versions an open read transaction can see).
type Reader struct {
	db   *bdg.DB
	opts ReaderOptions
	now  func() time.Time

	mu     sync.Mutex
	snaps  *query.Snapshots[*snapshot] // by id, with the quota
	closed bool
}

type snapshot struct {
	mu      sync.Mutex // one page at a time; guards txn use against Discard
	txn     *bdg.Txn
	version query.Version
	total   int64 // objects matched by the whole list, -1 when unknown
	expires time.Time
	done    bool
	client  string // who opened it: the quota it counts against
}

// Reader returns the read path of the store.
func (s *Store) Reader(o ReaderOptions) *Reader {
	if o.SnapshotTTL <= 0 {
		o.SnapshotTTL = 5 * time.Minute
	}
	if o.MaxSnapshots <= 0 {
		o.MaxSnapshots = 1024
	}
	return &Reader{db: s.db, opts: o, now: time.Now, snaps: query.NewSnapshots[*snapshot](o.MaxSnapshots, o.MaxSnapshotsPerClient)}
}

// Close discards every held snapshot; later continue tokens are expired.
// Call it before closing the store.
func (r *Reader) Close() error {
	r.mu.Lock()
	snaps := r.snaps.Clear()
	r.closed = true
	r.mu.Unlock()
	for _, s := range snaps {
		s.discard()
	}
	return nil
}

func (s *snapshot) discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.done = true
		s.txn.Discard()
	}
}

// Versions is the store's checkpoint per cluster.
func (r *Reader) Versions(_ context.Context) (query.Version, error) {
	v := query.Version{}
	err := r.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
}

// Get returns one object. With no cluster, the object must be in exactly
// one visible cluster; copies the caller may not see are skipped unread.
func (r *Reader) Get(_ context.Context, o query.GetOptions) (query.Object, error) {
	gvr := o.GVR
	out := query.Object{GVR: gvr}
	read := func(it *bdg.Item) error {
		return it.Value(func(v []byte) error {
			r, err := decodeRecord(v, false)
			out.JSON = append([]byte(nil), r.json...)
			return err
		})
	}
	err := r.db.View(func(txn *bdg.Txn) error {
		if o.Cluster != "" {
			if !o.Sees(o.Cluster) {
				return o.NotFound()
			}
			it, err := txn.Get(objKey(gvr, o.Namespace, o.Name, o.Cluster))
			if errors.Is(err, bdg.ErrKeyNotFound) {
				return o.NotFound()
			}
			if err != nil {
				return err
			}
			out.Cluster = o.Cluster
			return read(it)
		}
		prefix := append(join("o", gvr.Group, gvr.Version, gvr.Resource, o.Namespace, o.Name), sep)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		var clusters []string
		for it.Rewind(); it.Valid(); it.Next() {
			c := string(it.Item().Key()[len(prefix):])
			if !o.Sees(c) {
				continue
			}
			clusters = append(clusters, c)
			if len(clusters) == 1 {
				out.Cluster = c
				if err := read(it.Item()); err != nil {
					return err
				}
			}
		}
		switch len(clusters) {
		case 0:
			return o.NotFound()
		case 1:
			return nil
		}
		return o.Conflict(clusters)
	})
	if err != nil {
		return query.Object{}, err
	}
	return out, nil
}

// cursor is the backend part of a continue token. The query API seals it,
// so it is trusted here.
type cursor struct {
	Snap  string `json:"s"`
	After []byte `json:"a"`
	N     int64  `json:"n"` // objects returned by earlier pages
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	if err := json.Unmarshal([]byte(s), &c); err != nil || c.Snap == "" {
		return c, fmt.Errorf("%w: continue: not a Badger cursor", query.ErrInvalid)
	}
	return c, nil
}

// begin opens the snapshot of a first page, or finds the one a cursor
// names. The snapshot is locked on return.
func (r *Reader) begin(cont string, clusters []string, client string) (*snapshot, cursor, error) {
	now := r.now()
	if cont != "" {
		c, err := decodeCursor(cont)
		if err != nil {
			return nil, c, err
		}
		r.mu.Lock()
		s, _ := r.snaps.Get(c.Snap, now)
		r.mu.Unlock()
		if s != nil {
			s.mu.Lock()
			if !s.done && now.Before(s.expires) {
				return s, c, nil
			}
			s.mu.Unlock()
		}
		return nil, c, fmt.Errorf("%w: the snapshot of this list is gone (continue tokens live %s); start the list again", query.ErrExpired, r.opts.SnapshotTTL)
	}
	txn := r.db.NewTransaction(false)
	v := query.Version{}
	if err := versions(txn, v); err != nil {
		txn.Discard()
		return nil, cursor{}, err
	}
	v.Keep(clusters)
	s := &snapshot{txn: txn, version: v, total: -1, expires: now.Add(r.opts.SnapshotTTL), client: client}
	s.mu.Lock()
	return s, cursor{}, nil
}

// keep registers a snapshot for later pages and returns its id.
func (r *Reader) keep(s *snapshot) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return "", fmt.Errorf("%w: reader closed", query.ErrExpired)
	}
	// Past the quota (query.Snapshots) an older snapshot makes room; it
	// is discarded outside r.mu.
	drop := r.snaps.Add(id, s.client, s, r.now(), s.expires)
	r.mu.Unlock()
	for _, o := range drop {
		o.discard()
	}
	return id, nil
}

// release ends a page: a snapshot that is not kept is discarded.
func (r *Reader) release(s *snapshot, kept bool) {
	if !kept && !s.done {
		s.done = true
		s.txn.Discard()
	}
	s.mu.Unlock()
}

// snapPage is one page of a list or search read from a snapshot: the first
// page opens the snapshot, later pages find it by their cursor.
type snapPage struct {
	r    *Reader
	snap *snapshot
	cur  cursor
	kept bool // registered for later pages, so close must not discard it
	// last: this page ends the list, so a kept snapshot is needed no more.
	last bool
}

func (r *Reader) openPage(cont string, clusters []string, client string) (snapPage, error) {
	snap, cur, err := r.begin(cont, clusters, client)
	return snapPage{r: r, snap: snap, cur: cur, kept: cont != ""}, err
}

// close unlocks the snapshot, discarding it unless later pages need it.
// The last page of a paged list drops its snapshot at once rather than
// at its expiry: a finished list holds no read transaction and no room in
// its client's quota.
func (p *snapPage) close() {
	if p.last && p.kept {
		p.r.mu.Lock()
		p.r.snaps.Remove(p.cur.Snap) // ids are random: never another list's
		p.r.mu.Unlock()
		p.r.release(p.snap, false)
		return
	}
	p.r.release(p.snap, p.kept)
}

// token is the continue token after lastKey; a first page registers its
// snapshot here, so lists that fit in one page never hold one.
func (p *snapPage) token(lastKey []byte, returned int64) (string, error) {
	if !p.kept {
		id, err := p.r.keep(p.snap)
		if err != nil {
			return "", err
		}
		p.cur.Snap = id
		p.kept = true
	}
	return cursor{Snap: p.cur.Snap, After: lastKey, N: returned}.encode(), nil
}

// List returns one page of objects ordered by namespace, name, cluster.
func (r *Reader) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	l := listScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters)}
	l.page.Version = p.snap.version.Clone()
	if !l.resolve() {
		return l.page, nil
	}
	start, err := l.start(p.cur.After)
	if err != nil {
		return l.page, err
	}
	if more, err := l.scan(start); err != nil || !more {
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
	sel      labels.Selector
	prefix   []byte
	indexed  bool // prefix is a label index: values are read from the objects
	// implied: the index entry alone proves the selector (its only
	// requirement is the indexed one), so labels are not decoded again.
	implied bool
	pending []candidate // indexed keys waiting for their objects
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
	l.prefix, l.indexed = base, indexed
	if indexed {
		l.base, l.objBase = base, objPrefix(l.o.GVR)
	}
	if reqs, _ := l.sel.Requirements(); indexed && len(reqs) == 1 {
		l.implied = true
	}
	if ns != "" {
		l.prefix = append(append(bytes.Clone(base), ns...), sep)
	}
	return true
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
func (l *listScan) scan(start []byte) (bool, error) {
	it := l.txn.NewIterator(bdg.IteratorOptions{Prefix: l.prefix, PrefetchValues: !l.indexed, PrefetchSize: 100})
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
	key := item.Key()
	nsb, nameb, cb, err := tailBytes(key)
	if err != nil {
		return false, err
	}
	if l.clusters != nil && !l.clusters[string(cb)] {
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
		l.arenas = make([]arena, 1)
	}
	var obj query.Object
	if ok, err := l.matches(item, &c, &obj, &l.arenas[0]); err != nil || !ok {
		return false, err
	}
	l.page.Items = append(l.page.Items, obj)
	l.lastKey = item.KeyCopy(l.lastKey[:0])
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
	if l.o.Limit > 0 && l.implied && (l.o.Fields == nil || !l.o.Fields.NeedsObject()) {
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
	if len(l.arenas) < workers {
		l.arenas = append(l.arenas, make([]arena, workers-len(l.arenas))...)
	}
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
					ns, name, cluster, _ := tail(c.key)
					c.err = fmt.Errorf("label index points at a missing object %s/%s in %s: %w", ns, name, cluster, errCorrupt)
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
	}
	return false, nil
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
		if o.Fields.NeedsObject() {
			ok, err := o.Fields.Matches(c.ns, c.name, rec.json)
			if err != nil || !ok {
				return err
			}
		}
		matched = true
		if obj != nil {
			*obj = query.Object{Cluster: c.cluster, GVR: o.GVR, JSON: ar.clone(rec.json)}
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
// 256 KiB: a 15k-object list made 15k allocations for its copies, now a
// hundred. A chunk lives as long as any object in it, which is as long as
// the page. The zero value is ready.
type arena struct {
	buf  []byte
	next int
}

// Chunks grow from arenaFirst to arenaMost; a copy over a quarter of
// arenaMost gets its own allocation.
const arenaFirst, arenaMost = 8 << 10, 256 << 10

func (a *arena) clone(b []byte) []byte { return a.concat(b, nil) }

// concat copies x followed by y.
func (a *arena) concat(x, y []byte) []byte {
	n := len(x) + len(y)
	if n > arenaMost/4 {
		return append(append(make([]byte, 0, n), x...), y...)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.next = min(max(a.next*2, arenaFirst), arenaMost)
		a.buf = make([]byte, 0, a.next)
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

// Search matches text case-insensitively as a substring of the name,
// namespace, label keys and values and annotation keys and values of every
// object of the selected resources and clusters, ordered by resource,
// namespace, name, cluster, with snapshot-pinned paging like List.
func (r *Reader) Search(_ context.Context, o query.SearchOptions) (query.Page, error) {
	needle := strings.ToLower(strings.TrimSpace(o.Text))
	if needle == "" {
		return query.Page{}, fmt.Errorf("%w: search text is required", query.ErrInvalid)
	}
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	sc := searchScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters), needle: needle, bneedle: []byte(needle)}
	sc.page.Version = p.snap.version.Clone()
	more := false
	for _, prefix := range searchPrefixes(o.Resources) {
		if more, err = sc.scan(prefix, p.cur.After); err != nil {
			return sc.page, err
		} else if more {
			break
		}
	}
	if !more {
		p.last = true
		return sc.page, nil
	}
	sc.page.Continue, err = p.token(sc.lastKey, p.cur.N+int64(len(sc.page.Items)))
	return sc.page, err
}

// searchPrefixes are the ranges of the searched resources in key order, so
// a page resumes by comparing its cursor with them.
func searchPrefixes(gvrs []schema.GroupVersionResource) [][]byte {
	if len(gvrs) == 0 {
		return [][]byte{{'s', sep}}
	}
	var prefixes [][]byte
	for _, g := range gvrs {
		prefixes = append(prefixes, searchPrefix(g))
	}
	slices.SortFunc(prefixes, bytes.Compare)
	return slices.CompactFunc(prefixes, bytes.Equal)
}

// searchScan is one Search page and the filters of its hits.
type searchScan struct {
	o        query.SearchOptions
	txn      *bdg.Txn
	clusters map[string]bool // nil: every cluster
	needle   string          // lower case
	bneedle  []byte
	page     query.Page
	lastKey  []byte
	objKey   []byte
}

// scan fills the page from one resource's range of the search index; true
// when a hit beyond a full page proves there is a next one.
func (s *searchScan) scan(prefix, after []byte) (bool, error) {
	if after != nil && bytes.Compare(after, prefix) > 0 && !bytes.HasPrefix(after, prefix) {
		return false, nil // an earlier resource, done on previous pages
	}
	start := prefix
	if bytes.HasPrefix(after, prefix) {
		start = append(bytes.Clone(after), sep)
	}
	// Not prefetched: prefetching starts a goroutine per item to read what
	// is one small copy out of the page cache (the texts are in the value
	// log, writer.setSearch).
	it := s.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(start); it.Valid(); it.Next() {
		if more, err := s.visit(it.Item()); err != nil || more {
			return more, err
		}
	}
	return false, nil
}

func (s *searchScan) visit(item *bdg.Item) (more bool, err error) {
	key := item.Key()
	parts, ok := splitObjectKey(key)
	if !ok {
		return false, fmt.Errorf("malformed search key %q", key)
	}
	// Compared as bytes: every object is visited, few are hits.
	if s.clusters != nil && !s.clusters[string(parts[6])] || s.o.Namespace != "" && string(parts[4]) != s.o.Namespace {
		return false, nil
	}
	// Before the limit: a hidden object neither fills the page nor
	// becomes the cursor's position.
	if s.o.Visible != nil && !s.o.Visible.Allows(schema.GroupResource{Group: string(parts[1]), Resource: string(parts[3])}, string(parts[6]), string(parts[4])) {
		return false, nil
	}
	// The text is each label and annotation field lower-cased as the
	// needle is: a field contains the needle exactly when the text does
	// (the 0 bytes between fields are in neither, unless the needle has
	// one: the object decides). The name, namespace and cluster (the value
	// of the cluster annotations) are the key's.
	candidate := lowerContains(parts[4], s.bneedle) || lowerContains(parts[5], s.bneedle) || lowerContains(parts[6], s.bneedle)
	if !candidate {
		if err := item.Value(func(text []byte) error {
			candidate = bytes.Contains(text, s.bneedle)
			return nil
		}); err != nil || !candidate {
			return false, err
		}
	}
	hit, err := s.hit(key, parts)
	if err != nil || hit == nil {
		return false, err
	}
	if s.o.Limit > 0 && int64(len(s.page.Items)) == s.o.Limit {
		return true, nil
	}
	s.page.Items = append(s.page.Items, *hit)
	s.lastKey = item.KeyCopy(s.lastKey[:0])
	return false, nil
}

// lowerContains reports whether b, lower-cased as bytes.ToLower would,
// contains needle. Names are mostly lower-case ASCII already: those are
// searched as they are.
func lowerContains(b, needle []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return bytes.Contains(bytes.ToLower(b), needle)
		}
	}
	return bytes.Contains(b, needle)
}

// hit reads the object a search key names, from the same snapshot, and
// checks its metadata against the needle; nil when it does not match.
func (s *searchScan) hit(key []byte, parts [7][]byte) (*query.Object, error) {
	s.objKey = retag(s.objKey, key, 'o')
	item, err := s.txn.Get(s.objKey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, fmt.Errorf("search index names a missing object %s/%s in %s: %w", parts[4], parts[5], parts[6], errCorrupt)
	}
	if err != nil {
		return nil, err
	}
	var hit *query.Object
	err = item.Value(func(b []byte) error {
		rec, err := decodeRecord(b, false)
		if err != nil {
			return err
		}
		if !metaMatches(rec.json, s.needle) {
			return nil
		}
		hit = &query.Object{Cluster: string(parts[6]), JSON: bytes.Clone(rec.json),
			GVR: schema.GroupVersionResource{Group: string(parts[1]), Version: string(parts[2]), Resource: string(parts[3])}}
		return nil
	})
	return hit, err
}

// splitObjectKey cuts an object key into its seven parts (o, group,
// version, resource, namespace, name, cluster) without allocating.
func splitObjectKey(key []byte) (parts [7][]byte, ok bool) {
	for i := range 6 {
		j := bytes.IndexByte(key, sep)
		if j < 0 {
			return parts, false
		}
		parts[i], key = key[:j], key[j+1:]
	}
	parts[6] = key
	return parts, bytes.IndexByte(key, sep) < 0
}

func metaMatches(obj []byte, needle string) bool {
	var m struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if json.Unmarshal(obj, &m) != nil {
		return false
	}
	in := func(s string) bool { return strings.Contains(strings.ToLower(s), needle) }
	md := m.Metadata
	if in(md.Name) || in(md.Namespace) {
		return true
	}
	for k, v := range md.Labels {
		if in(k) || in(v) {
			return true
		}
	}
	for k, v := range md.Annotations {
		// Every object carries the cache-source annotations: their keys
		// would match everything ("cache", "cluster"); their values (the
		// cluster name) stay searchable.
		if in(v) || k != "fleetview.io/cluster" && k != "resource.karmada.io/cached-from-cluster" && in(k) {
			return true
		}
	}
	return false
}

// clusterSet is nil for "every cluster" (a nil list) and the set otherwise.
func clusterSet(cs []string) map[string]bool {
	if cs == nil {
		return nil
	}
	set := make(map[string]bool, len(cs))
	for _, c := range cs {
		set[c] = true
	}
	return set
}
