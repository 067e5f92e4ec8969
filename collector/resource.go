package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// want is what the registries ask of one resource in this cluster.
type want struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	// namespaces is nil for all namespaces, else the sorted set to watch.
	namespaces []string
	// secretData is where Secret data is kept (spec.includeSecretData of
	// the registries selecting them).
	secretData dataScope
	// names are the short names and categories the member's discovery
	// reports; they only describe the resource, so equal ignores them (an
	// edited short name must not restart, and relist, the sync).
	names apiNames
}

// apiNames are the short names and categories of a resource in the
// member's discovery, reported in the inventory.
type apiNames struct {
	shortNames, categories []string
}

// dataScope is where Secret data is kept: every namespace (all; also a
// cluster-scoped resource), or the sorted namespaces of the selectors that
// opted in. The zero value keeps it nowhere.
type dataScope struct {
	all        bool
	namespaces []string
}

func (d dataScope) in(ns string) bool {
	if d.all {
		return true
	}
	i := sort.SearchStrings(d.namespaces, ns)
	return i < len(d.namespaces) && d.namespaces[i] == ns
}

func (w want) equal(o want) bool {
	if w.gvr != o.gvr || w.kind != o.kind || w.namespaced != o.namespaced || w.secretData.all != o.secretData.all ||
		!slices.Equal(w.secretData.namespaces, o.secretData.namespaces) || len(w.namespaces) != len(o.namespaces) || (w.namespaces == nil) != (o.namespaces == nil) {
		return false
	}
	for i := range w.namespaces {
		if w.namespaces[i] != o.namespaces[i] {
			return false
		}
	}
	return true
}

func (w want) inScope(ns string) bool {
	if w.namespaces == nil || !w.namespaced {
		return true
	}
	i := sort.SearchStrings(w.namespaces, ns)
	return i < len(w.namespaces) && w.namespaces[i] == ns
}

// keepsData reports whether an object of this resource in namespace ns
// keeps its Secret data.
func (w want) keepsData(ns string) bool { return w.gvr == secretsGVR && w.secretData.in(ns) }

// keepsAnyData reports whether any object of this resource keeps Secret
// data (the inventory's flag).
func (w want) keepsAnyData() bool {
	return w.gvr == secretsGVR && (w.secretData.all || len(w.secretData.namespaces) > 0)
}

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

// publisher is the part of the collector a resource sync publishes through.
type publisher interface {
	publish(ctx context.Context, msg *nats.Msg) error
	flush(ctx context.Context) error
	maxPayload() int64
	statusChanged()
}

// DefaultPageSize is the list page size unless Config.PageSize says
// otherwise. kubectl and client-go reflectors ask for 500; pages are
// streamed (liststream.go), so the collector's memory does not grow with
// the page size, and at 100k Pods 500, 1000 and 2000 synced alike (10.8k,
// 11.6k, 10.8k objects/s, 108-110 MB; docs/benchmarks/collector.md) while a
// relist without changes took 11.4, 10.1 and 7.6 s. 1000 takes most of that
// with half the apiserver's per-request work of 2000.
const DefaultPageSize = 1000

// Defaults of a resource sync; see Config.
const (
	// watchTimeout makes the apiserver end a watch after a while, so a
	// silently broken connection cannot hang a watch forever.
	watchTimeout = 5 * time.Minute
)

// errRelist ends a watch phase so the resource lists and reconciles again.
var errRelist = errors.New("relist requested")

// resourceSync mirrors one resource of the member cluster into the stream.
// It does not use a client-go Reflector: a reflector hands its store the
// whole initial list at once (every object decoded, all pages accumulated),
// which is what made informer-based caches need gigabytes for large
// clusters. Here each page is published and dropped before the next one is
// requested, and only objRef is kept per object.
type resourceSync struct {
	resourceSyncConfig

	mu    sync.Mutex
	objs  map[string]objRef // uid -> ref
	byKey map[nsName]string // namespace/name -> uid
	ns    map[string]string // interned namespace names
	gen   uint32
	// refused holds objects refused for size (uid -> description).
	refused map[string]string
	synced  atomic.Bool
	count   atomic.Int64

	relist chan struct{}
	errMu  sync.Mutex
	err    error
	// quotaErr is the last publish refusal for the stream's byte quota
	// since the last relist (stream.ErrQuotaExceeded).
	quotaErr atomic.Pointer[error]
}

// resourceSyncConfig is what one resourceSync is made of; the collector
// fills one per wanted resource. It is a struct because ten positional
// parameters, several of the same type, were easy to pass in the wrong order.
type resourceSyncConfig struct {
	cluster string
	w       want
	dyn     dynamic.Interface
	raw     rest.Interface
	js      jetstream.JetStream
	pub     publisher
	log     *slog.Logger
	// ttl is how long tombstones stay in the stream.
	ttl time.Duration
	// pageSize is the list page size; 0 or less means DefaultPageSize.
	pageSize int64
	m        *metrics
}

func newResourceSync(cfg resourceSyncConfig) *resourceSync {
	if cfg.pageSize <= 0 {
		cfg.pageSize = DefaultPageSize
	}
	cfg.log = cfg.log.With("gvr", cfg.w.gvr.String())
	return &resourceSync{
		resourceSyncConfig: cfg,
		objs:               map[string]objRef{},
		byKey:              map[nsName]string{},
		ns:                 map[string]string{},
		refused:            map[string]string{},
		relist:             make(chan struct{}, 1),
	}
}

// requestRelist makes the resource list again and reconcile: the way back to
// "stream equals cluster" after any publish that may have been lost.
// relistCause is the error a cycle ended with, unless a relist it asked
// for was caused by publishes refused for the stream's byte quota: a
// relist right away would be refused again, so the quota error is
// reported on the resource (the inventory shows it) and backed off like
// any failure; the relist after the wait republishes what was refused.
func (s *resourceSync) relistCause(err error) error {
	if qe := s.quotaErr.Swap(nil); qe != nil && errors.Is(err, errRelist) {
		return *qe
	}
	return err
}

func (s *resourceSync) requestRelist() {
	select {
	case s.relist <- struct{}{}:
	default:
	}
}

// publishFailed is called for a publish that was not acknowledged. A lost
// upsert marks the object's version unknown, so the relist publishes it
// again (or, if it is gone by then, tombstones it); a lost tombstone puts
// the object back, so the relist (which will not find it) tombstones it
// again. Either way nothing is lost, only retried. Objects are never simply
// forgotten: an object the collector no longer knows of could not be
// tombstoned, and its last published version would stay in the stream.
func (s *resourceSync) publishFailed(uid string, h nats.Header, err error) {
	if qe := stream.QuotaError(err); qe != nil {
		s.quotaErr.Store(&qe)
	}
	s.mu.Lock()
	switch h.Get(stream.HdrType) {
	case fleetviewv1.EventType_EVENT_TYPE_DELETE.String():
		if _, ok := s.objs[uid]; !ok {
			ref := objRef{rv: h.Get(stream.HdrRV), ns: s.intern(h.Get(stream.HdrNamespace)), name: h.Get(stream.HdrName)}
			s.objs[uid] = ref
			if _, taken := s.byKey[nsName{ref.ns, ref.name}]; !taken {
				s.byKey[nsName{ref.ns, ref.name}] = uid
			}
			s.count.Store(int64(len(s.objs)))
		}
	default:
		// Only if it is still the version that failed: a newer one has
		// its own acknowledgement (or failure) coming.
		if ref, ok := s.objs[uid]; ok && ref.rv == h.Get(stream.HdrRV) {
			s.unknownLocked(uid)
		}
	}
	s.mu.Unlock()
	s.requestRelist()
}

// unknownLocked marks what the stream holds for uid as unknown: the next
// list republishes the object, or, if it is gone by then, the sweep after
// that list tombstones it. The list generation is kept, so the sweep of a
// list that already saw the object does not tombstone it in passing.
func (s *resourceSync) unknownLocked(uid string) {
	if ref, ok := s.objs[uid]; ok {
		ref.stale = true
		s.objs[uid] = ref
	}
}

func (s *resourceSync) intern(ns string) string {
	if v, ok := s.ns[ns]; ok {
		return v
	}
	s.ns[ns] = ns
	return ns
}

// backoff doubles a wait from 500ms up to a cap, so an outage (NATS or the
// member apiserver) is retried without hammering either.
type backoff struct{ d, max time.Duration }

func (b *backoff) wait(ctx context.Context) bool {
	if b.d == 0 {
		b.d = 500 * time.Millisecond
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, b.max)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *backoff) reset() { b.d = 0 }

// quotaRetry is the longest wait between relists while the cluster's
// stream refuses publishes for its byte quota.
const quotaRetry = 2 * time.Minute

// Run hydrates from the stream, then lists, reconciles and watches until
// ctx ends, listing again whenever a watch cannot resume or a publish was
// lost. Errors are retried with backoff: the collector keeps running through
// NATS and apiserver outages.
func (s *resourceSync) Run(ctx context.Context) error {
	b := backoff{max: 10 * time.Second}
	quotaBackoff := backoff{d: quotaRetry / 2, max: quotaRetry}
	for {
		err := s.hydrate(ctx)
		if err == nil {
			break
		}
		s.m.hubRefused(err)
		s.setErr(err)
		if !b.wait(ctx) {
			return nil
		}
	}
	b.reset()
	// relistWait spaces relists whose list itself lost publishes: NATS is
	// failing them (a stream leader being elected after a server of its
	// cluster died, a server restarting), and listing again at once would
	// mostly lose them again while loading the member apiserver. Nothing
	// is dropped meanwhile: the failed objects stay marked for the next
	// list, which republishes their current state (never an older one).
	relistWait := backoff{max: 10 * time.Second}
	for {
		err := s.cycle(ctx)
		synced := s.synced.Swap(false)
		if ctx.Err() != nil {
			return nil
		}
		s.m.relists.Add(1)
		err = s.relistCause(err)
		if errors.Is(err, errRelist) {
			s.log.Info("relisting", "after_sync", synced)
			b.reset()
			if synced {
				relistWait.reset()
			} else if !relistWait.wait(ctx) {
				return nil
			}
			continue
		}
		s.setErr(err)
		w := &b
		if errors.Is(err, stream.ErrQuotaExceeded) {
			// A full stream stays full until an operator acts: relist
			// (a full list of the member apiserver) rarely.
			w = &quotaBackoff
		}
		if !w.wait(ctx) {
			return nil
		}
	}
}

// cycle lists every namespace scope, tombstones what the lists no longer
// return, publishes the SYNCED marker once every publish is acknowledged,
// then watches until a relist is needed.
func (s *resourceSync) cycle(ctx context.Context) error {
	select { // this list satisfies any relist requested before it
	case <-s.relist:
	default:
	}
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	scopes := s.scopes()
	rvs := make([]string, len(scopes))
	for i, ns := range scopes {
		rv, err := s.listScope(ctx, ns, gen)
		if err != nil {
			return err
		}
		rvs[i] = rv
	}
	if err := s.sweep(ctx, gen); err != nil {
		return err
	}
	if err := s.pub.flush(ctx); err != nil {
		return err
	}
	select { // a publish of this list failed: its object was forgotten
	case <-s.relist:
		return errRelist
	default:
	}
	if err := s.publishControl(ctx, fleetviewv1.EventType_EVENT_TYPE_SYNCED); err != nil {
		return err
	}
	s.synced.Store(true)
	s.setErr(nil)
	s.log.Info("synced", "objects", s.count.Load())

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(scopes))
	for i, ns := range scopes {
		go func() { errc <- s.watchScope(wctx, ns, rvs[i]) }()
	}
	var err error
	waiting := len(scopes)
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.relist:
		err = errRelist
	case err = <-errc:
		waiting--
	}
	cancel()
	for range waiting {
		<-errc
	}
	return err
}

func (s *resourceSync) scopes() []string {
	if s.w.namespaces == nil || !s.w.namespaced {
		return []string{metav1.NamespaceAll}
	}
	return s.w.namespaces
}

// listScope lists one namespace scope page by page, publishing what changed;
// it returns the list's resourceVersion to watch from. Pages are streamed
// item by item as raw JSON (liststream.go, internal/rawjson): only changed
// objects are pruned and re-encoded, and a page costs one window buffer that
// grows only to its largest object, whatever the page size. The fetcher reads the
// head of each response (the list metadata comes before the items) and asks
// for the next page at once, so the apiserver builds it while this one is
// published. Two windows exist and they are reused: nothing keeps a
// reference into one once its item has been published (metadata strings,
// pruned objects and events are copies).
func (s *resourceSync) listScope(ctx context.Context, ns string, gen uint32) (string, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Unbuffered: one page is published while the fetcher holds the next
	// (its request made, its head read); more would only hold more
	// responses open in the transport.
	pages := make(chan *listPage)
	free := make(chan []byte, listWindows)
	for range listWindows {
		free <- make([]byte, 0, listWindow)
	}
	errc := make(chan error, 1)
	go func() {
		defer close(pages)
		errc <- s.fetchPages(lctx, ns, free, pages)
	}()
	rv := ""
	var err error
	for page := range pages {
		var prv string
		prv, err = s.publishPage(ctx, ns, page, gen)
		page.body.Close()
		free <- page.lr.window()
		if err != nil {
			cancel() // the fetcher stops and closes what it holds
			break
		}
		rv = prv
	}
	if ferr := <-errc; err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return "", err
	}
	return rv, nil
}

// listWindows is how many list pages are open at once: one being published,
// one whose head the fetcher has read.
const listWindows = 2

// listPage is one list response whose head has been read.
type listPage struct {
	lr   *listReader
	body io.Closer
	// cont receives the continue token once the page is read: the fetcher
	// waits for it when the metadata came after the items.
	cont chan string
}

// publishPage publishes the items of one page and returns its
// resourceVersion.
func (s *resourceSync) publishPage(ctx context.Context, ns string, page *listPage, gen uint32) (string, error) {
	for {
		item, ok, err := page.lr.next()
		if err != nil {
			return "", fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		if !ok {
			break
		}
		m, err := readMeta(item)
		if err != nil {
			return "", fmt.Errorf("list %s in %q: item %d: %w", s.w.gvr, ns, page.lr.items, err)
		}
		if err := s.upsert(ctx, m, item, gen); err != nil {
			return "", err
		}
	}
	page.cont <- page.lr.meta.continueToken
	return page.lr.meta.resourceVersion, nil
}

// fetchPages requests every page of one list, reads the head of each into a
// window taken from free and sends it to out; it requests the next page as
// soon as the head (or, when the metadata follows the items, the consumer)
// gave its continue token.
func (s *resourceSync) fetchPages(ctx context.Context, ns string, free <-chan []byte, out chan<- *listPage) error {
	cont := ""
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		req := s.raw.Get().AbsPath(s.path(ns)...).SetHeader("Accept", "application/json").
			Param("limit", strconv.FormatInt(s.pageSize, 10))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.Stream(ctx)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				// The continue token outlived the snapshot: objects marked
				// so far may since have been deleted, so start a new
				// generation rather than mix two snapshots.
				return errRelist
			}
			return fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		page := &listPage{lr: newListReader(body, buf), body: body, cont: make(chan string, 1)}
		if err := page.lr.readHead(); err != nil {
			body.Close()
			return fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		// Read before the page is handed on: the consumer owns it then.
		early, next := page.lr.headKnown(), page.lr.meta.continueToken
		select {
		case out <- page:
		case <-ctx.Done():
			body.Close()
			return ctx.Err()
		}
		if !early {
			select {
			case next = <-page.cont:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if next == "" {
			return nil
		}
		cont = next
	}
}

// path is the REST path of the resource in namespace ns ("" = all).
func (s *resourceSync) path(ns string) []string {
	p := []string{"/api", s.w.gvr.Version}
	if s.w.gvr.Group != "" {
		p = []string{"/apis", s.w.gvr.Group, s.w.gvr.Version}
	}
	if ns != "" {
		p = append(p, "namespaces", ns)
	}
	return append(p, s.w.gvr.Resource)
}

// sweep tombstones every object the last list did not return.
func (s *resourceSync) sweep(ctx context.Context, gen uint32) error {
	var gone []objRefUID
	s.mu.Lock()
	for uid, ref := range s.objs {
		if ref.gen != gen {
			gone = append(gone, objRefUID{ref, uid})
		}
	}
	s.mu.Unlock()
	for _, g := range gone {
		if err := s.removeRef(ctx, g.uid, g.ref.rv, g.ref); err != nil {
			return err
		}
	}
	return nil
}

// watchScope watches one scope from rv, resuming after a closed watch and
// retrying while the apiserver is unreachable. It returns errRelist when the
// watch cannot resume (410 Gone) and an error when a publish failed.
func (s *resourceSync) watchScope(ctx context.Context, ns, rv string) error {
	ri := s.dyn.Resource(s.w.gvr).Namespace(ns)
	b := backoff{max: 10 * time.Second}
	for {
		timeout := int64(watchTimeout / time.Second)
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return errRelist
			}
			s.log.Warn("watch failed; retrying", "namespace", ns, "err", err)
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		var got bool
		rv, got, err = s.consume(ctx, w, rv)
		w.Stop()
		if err != nil {
			return err
		}
		if got {
			b.reset()
		}
	}
}

func (s *resourceSync) consume(ctx context.Context, w watch.Interface, rv string) (string, bool, error) {
	got := false
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, got, ctx.Err()
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, got, nil
		}
		got = true
		switch ev.Type {
		case watch.Added, watch.Modified:
			u, isU := ev.Object.(*unstructured.Unstructured)
			if !isU {
				return rv, got, fmt.Errorf("unexpected object type %T", ev.Object)
			}
			b, err := u.MarshalJSON()
			if err != nil {
				return rv, got, err
			}
			m := objMeta{uid: string(u.GetUID()), namespace: u.GetNamespace(), name: u.GetName(), rv: u.GetResourceVersion()}
			if err := s.upsert(ctx, m, b, 0); err != nil {
				return rv, got, err
			}
			rv = m.rv
		case watch.Deleted:
			if err := s.remove(ctx, ev.Object); err != nil {
				return rv, got, err
			}
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		case watch.Bookmark:
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, got, errRelist
			}
			return rv, got, fmt.Errorf("watch %s: %w", s.w.gvr, err)
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	return nil, fmt.Errorf("unexpected object type %T", obj)
}

// hydrate rebuilds uid -> (namespace, name, resourceVersion) from the last
// message of every subject of this resource, reading headers only. Objects
// outside the current namespace scope get tombstones right away: a scope that
// shrank must not leave ghosts.
func (s *resourceSync) hydrate(ctx context.Context) error {
	s.mu.Lock()
	s.objs, s.byKey = map[string]objRef{}, map[nsName]string{}
	s.mu.Unlock()
	cons, err := s.js.OrderedConsumer(ctx, stream.StreamName(s.cluster), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.ResourceFilter(s.cluster, s.w.gvr)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
		// The hub lets a collector with per-cluster credentials make
		// consumers named with its own prefix only.
		NamePrefix: stream.ConsumerNamePrefix(s.cluster),
	})
	if err != nil {
		return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
	}
	pending := info.NumPending
	var stale []objRefUID
	for pending > 0 {
		// Ask for no more than is pending: a fetch waits for a full batch
		// until its deadline.
		batch, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		n := 0
		s.mu.Lock()
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				s.mu.Unlock()
				return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
			}
			pending = md.NumPending
			h := m.Headers()
			if h.Get(stream.HdrType) != fleetviewv1.EventType_EVENT_TYPE_UPSERT.String() {
				continue
			}
			ps, err := stream.ParseSubject(m.Subject())
			if err != nil {
				s.mu.Unlock()
				return err
			}
			ref := objRef{rv: h.Get(stream.HdrRV), ns: s.intern(h.Get(stream.HdrNamespace)), name: h.Get(stream.HdrName)}
			if !s.w.inScope(ref.ns) {
				stale = append(stale, objRefUID{ref, ps.UID})
				continue
			}
			if (h.Get(stream.HdrSecretData) == stream.SecretDataKept) != s.w.keepsData(ref.ns) {
				// Published under the other Secret-data choice: publish
				// again even if unchanged.
				ref.stale = true
			}
			s.objs[ps.UID] = ref
			s.byKey[nsName{ref.ns, ref.name}] = ps.UID
		}
		s.mu.Unlock()
		if err := batch.Error(); err != nil {
			return fmt.Errorf("hydrate %s: %w", s.w.gvr, err)
		}
		if n == 0 {
			return fmt.Errorf("hydrate %s: stream returned no messages with %d pending", s.w.gvr, pending)
		}
	}
	for _, st := range stale {
		if err := s.publishDelete(ctx, st.uid, st.ref); err != nil {
			return err
		}
	}
	s.count.Store(int64(len(s.objs)))
	s.log.Debug("hydrated from stream", "objects", len(s.objs), "outOfScope", len(stale))
	return nil
}

type objRefUID struct {
	ref objRef
	uid string
}

func (s *resourceSync) event(t fleetviewv1.EventType, uid string, ref objRef) *fleetviewv1.ResourceEvent {
	return &fleetviewv1.ResourceEvent{
		Cluster: s.cluster, Gvr: stream.ProtoGVR(s.w.gvr), Kind: s.w.kind, Uid: uid,
		Namespace: ref.ns, Name: ref.name, ResourceVersion: ref.rv, Type: t,
		ObservedUnixNano: time.Now().UnixNano(), Namespaced: s.w.namespaced,
	}
}

// headerAllowance is what the headers of an object message may take of the
// NATS max payload (which counts headers and data together).
const headerAllowance = 1024

// publishUpsert publishes one object. It reports false when the object was
// refused because it cannot fit in a NATS message; the refusal is counted,
// logged and shown in the registry status, never silent.
func (s *resourceSync) publishUpsert(ctx context.Context, m objMeta, raw []byte) (bool, error) {
	keep := s.w.keepsData(m.namespace)
	obj, err := prune(raw, s.cluster, s.w.gvr, keep)
	if errors.Is(err, rawjson.ErrMalformed) {
		// An object the hub would dead-letter (nested past
		// rawjson.MaxDepth, which the apiserver allows): refused like an
		// object too large, and shown, rather than failing the sync of
		// every other object of the resource.
		desc := fmt.Sprintf("%s/%s (%v)", m.namespace, m.name, err)
		s.m.refused.Add(1)
		s.log.Error("object not acceptable JSON for the hub; refused", "object", desc)
		s.mu.Lock()
		s.refused[m.uid] = desc
		s.mu.Unlock()
		s.pub.statusChanged()
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("prune %s/%s: %w", m.namespace, m.name, err)
	}
	ev := s.event(fleetviewv1.EventType_EVENT_TYPE_UPSERT, m.uid, objRef{rv: m.rv, ns: m.namespace, name: m.name})
	ev.Object = obj
	msg, err := stream.ObjectMsg(ev, stream.ObjectMsgOptions{SecretDataKept: keep})
	if err != nil {
		return false, err
	}
	if max := s.pub.maxPayload(); max > 0 && int64(len(msg.Data)+headerAllowance) > max {
		desc := fmt.Sprintf("%s/%s (%d bytes, NATS max payload %d)", m.namespace, m.name, len(msg.Data), max)
		s.m.refused.Add(1)
		s.log.Error("object too large for NATS; refused", "object", desc)
		s.mu.Lock()
		s.refused[m.uid] = desc
		s.mu.Unlock()
		s.pub.statusChanged()
		return false, nil
	}
	s.clearRefused(m.uid)
	if err := s.pub.publish(ctx, msg); err != nil {
		return false, err
	}
	s.m.upserts.Add(1)
	return true, nil
}

func (s *resourceSync) clearRefused(uid string) {
	s.mu.Lock()
	_, was := s.refused[uid]
	delete(s.refused, uid)
	s.mu.Unlock()
	if was {
		s.pub.statusChanged()
	}
}

func (s *resourceSync) refusedObjects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.refused))
	for _, d := range s.refused {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func (s *resourceSync) publishDelete(ctx context.Context, uid string, ref objRef) error {
	msg, err := stream.ObjectMsg(s.event(fleetviewv1.EventType_EVENT_TYPE_DELETE, uid, ref), stream.ObjectMsgOptions{TTL: s.ttl})
	if err != nil {
		return err
	}
	if err := s.pub.publish(ctx, msg); err != nil {
		return err
	}
	s.m.tombstones.Add(1)
	return nil
}

// upsert publishes an object unless the stream already holds this version,
// and marks it seen by list generation gen (0 from a watch). A different UID
// under the same namespace/name means the object was deleted and recreated:
// the old UID gets a tombstone. On a failed publish the object is forgotten
// (or, for the tombstone, put back) so the next list retries it.
func (s *resourceSync) upsert(ctx context.Context, m objMeta, raw []byte, gen uint32) error {
	uid := m.uid
	s.mu.Lock()
	ref := objRef{rv: m.rv, ns: s.intern(m.namespace), name: m.name, gen: gen}
	key := nsName{ref.ns, ref.name}
	old, known := s.objs[uid]
	if gen == 0 {
		ref.gen = old.gen
	}
	prevUID, hadKey := s.byKey[key]
	s.objs[uid] = ref
	s.byKey[key] = uid
	var prev objRef
	replaced := hadKey && prevUID != uid
	if replaced {
		prev = s.objs[prevUID]
		delete(s.objs, prevUID)
		delete(s.refused, prevUID)
	}
	s.count.Store(int64(len(s.objs)))
	s.mu.Unlock()
	if replaced {
		if err := s.publishDelete(ctx, prevUID, prev); err != nil {
			s.putBack(prevUID, prev)
			return err
		}
	}
	if known && old.rv == ref.rv && !old.stale {
		s.m.unchanged.Add(1)
		return nil
	}
	if _, err := s.publishUpsert(ctx, m, raw); err != nil {
		s.mu.Lock()
		if cur, ok := s.objs[uid]; ok && cur.rv == m.rv {
			s.unknownLocked(uid) // keep it known, so a sweep can still tombstone it
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// putBack restores an object whose tombstone could not be published, unless
// something newer took its place.
func (s *resourceSync) putBack(uid string, ref objRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[uid]; ok {
		return
	}
	ref.gen = 0 // not seen by any list: the next sweep retries the tombstone
	s.objs[uid] = ref
	if _, taken := s.byKey[nsName{ref.ns, ref.name}]; !taken {
		s.byKey[nsName{ref.ns, ref.name}] = uid
	}
	s.count.Store(int64(len(s.objs)))
}

// remove tombstones a deleted object. A DeletedFinalStateUnknown (from
// client-go machinery) is unwrapped: its last known state names the object.
func (s *resourceSync) remove(ctx context.Context, obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object type %T", obj)
	}
	ref := objRef{rv: u.GetResourceVersion(), ns: u.GetNamespace(), name: u.GetName()}
	return s.removeRef(ctx, string(u.GetUID()), u.GetResourceVersion(), ref)
}

func (s *resourceSync) removeRef(ctx context.Context, uid, rv string, fallback objRef) error {
	s.mu.Lock()
	ref, known := s.objs[uid]
	if !known {
		ref = fallback
	}
	delete(s.objs, uid)
	delete(s.refused, uid)
	if s.byKey[nsName{ref.ns, ref.name}] == uid {
		delete(s.byKey, nsName{ref.ns, ref.name})
	}
	s.count.Store(int64(len(s.objs)))
	s.mu.Unlock()
	ref.rv = rv
	if err := s.publishDelete(ctx, uid, ref); err != nil {
		s.putBack(uid, ref)
		return err
	}
	return nil
}

func (s *resourceSync) publishControl(ctx context.Context, t fleetviewv1.EventType) error {
	return publishControl(ctx, s.js, s.cluster, s.w, t)
}

func publishControl(ctx context.Context, js jetstream.JetStream, cluster string, w want, t fleetviewv1.EventType) error {
	ev := &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(w.gvr), Kind: w.kind, Type: t, ObservedUnixNano: time.Now().UnixNano(), Namespaced: w.namespaced}
	data, err := stream.Encode(ev)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, stream.ControlSubject(cluster, w.gvr), data); err != nil {
		return fmt.Errorf("publish %s marker for %s: %w", t, w.gvr, err)
	}
	return nil
}

// setErr records the last error (nil clears it) for the inventory.
func (s *resourceSync) setErr(err error) {
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, errRelist)) {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	if err != nil {
		s.log.Warn("resource sync failed; retrying", "err", err)
	}
}

func (s *resourceSync) lastErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}
