package collector

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/stream"
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

// publisher is the part of the collector a resource sync publishes through.
type publisher interface {
	publish(ctx context.Context, msg *nats.Msg) error
	// awaitReconnect reports whether NATS is unreachable now, and if so
	// has s relist once it is reachable again (see publishFailed).
	awaitReconnect(s *resourceSync) bool
	// awaitConnected returns once NATS is reachable (or ctx ends): a
	// watch resumes then (resume.go).
	awaitConnected(ctx context.Context) error
	// ackTimeout is the publishes' acknowledgement timeout.
	ackTimeout() time.Duration
	flush(ctx context.Context) error
	maxPayload() int64
	statusChanged()
	// syncChanged: a resource's sync state changed, so the inventory
	// record should say so now rather than at the next heartbeat.
	syncChanged()
}

// DefaultPageSize is the list page size unless Config.PageSize says
// otherwise. kubectl and client-go reflectors ask for 500; pages are
// streamed (liststream.go), so the collector's memory does not grow with
// the page size, and at 100k Pods 500, 1000 and 2000 synced alike in rate
// and memory while a relist without changes got faster with bigger pages
// (measured: docs/benchmarks/collector.md#findings). 1000 takes most of
// that with half the apiserver's per-request work of 2000.
const DefaultPageSize = 1000

// Defaults of a resource sync; see Config.
const (
	// watchTimeout makes the apiserver end a watch after a while, so a
	// silently broken connection cannot hang a watch forever.
	watchTimeout = 5 * time.Minute
)

// errRelist ends a watch phase so the resource lists and reconciles again.
var errRelist = errors.New("relist requested")

// errResume ends one watch of a scope after a publish of it failed: the
// scope resumes from its last acknowledged resourceVersion (resume.go).
var errResume = errors.New("resume requested")

// resourceSync mirrors one resource of the member cluster into the stream.
// It does not use a client-go Reflector: a reflector hands its store the
// whole initial list at once (every object decoded, all pages accumulated),
// which is what made informer-based caches need gigabytes for large
// clusters. Here each page is published and dropped before the next one is
// requested, and only the ledger (an objRef per object) is kept.
type resourceSync struct {
	resourceSyncConfig

	// ledger is what the stream holds for each object of the resource.
	ledger *ledger
	synced atomic.Bool
	// relistOnReconnect: a publish timed out while NATS was unreachable;
	// relist once it is reachable again (Collector.relistOnReconnect).
	relistOnReconnect atomic.Bool

	relist chan struct{}
	errMu  sync.Mutex
	err    error
	// quotaErr is the last publish refusal for the stream's byte quota
	// since the last relist (stream.ErrQuotaExceeded).
	quotaErr atomic.Pointer[error]
	// stream is the cluster's stream as a resume last read it
	// (lastStored), kept so a replay asks one request per object.
	streamMu sync.Mutex
	stream   jetstream.Stream
	// columns are the resource's Table columns (table.go).
	columns atomic.Pointer[[]inventory.Column]
}

// resourceSyncConfig is what one resourceSync is made of; the collector
// fills one per wanted resource. It is a struct because ten positional
// parameters, several of the same type, were easy to pass in the wrong order.
type resourceSyncConfig struct {
	cluster string
	w       want
	raw     rest.Interface
	js      jetstream.JetStream
	pub     publisher
	log     *slog.Logger
	// ttl is how long tombstones stay in the stream.
	ttl time.Duration
	// pageSize is the list page size; 0 or less means DefaultPageSize.
	pageSize int64
	m        *metrics
	// streamEmpty: the stream holds nothing of this resource (see
	// Collector.emptyAtStart), so the first hydrate is skipped.
	streamEmpty bool
}

func newResourceSync(cfg resourceSyncConfig) *resourceSync {
	if cfg.pageSize <= 0 {
		cfg.pageSize = DefaultPageSize
	}
	cfg.log = cfg.log.With("gvr", cfg.w.gvr.String())
	return &resourceSync{
		resourceSyncConfig: cfg,
		ledger:             newLedger(),
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

// backoff doubles its wait from 500 ms up to max, so an outage (NATS or
// the member apiserver) is retried without hammering either. Each wait is
// drawn from [d, 1.5d) (wait.Jitter): collectors that failed together, as
// a whole fleet does against a saturated hub it started with, retry
// spread out, not in waves the size of the fleet that fail together
// again; and no sooner than without the jitter, which would only add to
// the load.
type backoff struct{ d, max time.Duration }

// next is the wait before the next retry.
func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = 500 * time.Millisecond
	}
	d := wait.Jitter(b.d, 0.5)
	b.d = min(2*b.d, b.max)
	return d
}

func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *backoff) reset() { b.d = 0 }

// quotaRetry is the longest wait between relists while the cluster's
// stream refuses publishes for its byte quota (before backoff's jitter).
const quotaRetry = 2 * time.Minute

// Run hydrates from the stream, then lists, reconciles and watches until
// ctx ends, listing again whenever a watch cannot resume or a publish was
// lost. Errors are retried with backoff: the collector keeps running through
// NATS and apiserver outages.
func (s *resourceSync) Run(ctx context.Context) error {
	b := backoff{max: 10 * time.Second}
	quotaBackoff := backoff{d: quotaRetry / 2, max: quotaRetry}
	for !s.streamEmpty {
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
