package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
)

// Config is a validated collector configuration.
type Config struct {
	Cluster  string
	REST     *rest.Config
	NATS     *nats.Conn
	Labels   map[string]string
	Provider string
	Region   string
	Zone     string
	// ClusterInfoConfigMap ("namespace/name", empty: none) is a ConfigMap in
	// the member cluster whose data keys provider, region, zone and labels
	// ("k=v,k2=v2") describe the cluster. Values given in the fields above
	// win; labels are merged, the fields' values winning per key. It is read
	// at every heartbeat, so edits apply without a restart.
	ClusterInfoConfigMap string
	// HeartbeatInterval is how often the inventory record is refreshed; a
	// member apiserver that stops answering is reported not ready within
	// HeartbeatInterval plus 5 s.
	HeartbeatInterval time.Duration
	// RecheckInterval is how often resources skipped as not served are looked
	// up again, so an API that appears later (a CRD installed) is picked up.
	RecheckInterval time.Duration
	// DiscoveryInterval is how often the member's discovery is read again
	// while a registry it matches has a wildcard selector, so a CRD
	// installed or removed there is cached or dropped within it (default
	// 5 s; two small requests with aggregated discovery, and only on
	// clusters a wildcard selects).
	DiscoveryInterval time.Duration
	TombstoneTTL      time.Duration
	// PageSize is the list page size (default DefaultPageSize); pages are
	// streamed object by object, so memory does not grow with it.
	PageSize int64
	// PublishAckTimeout bounds the wait for a publish acknowledgement; an
	// unacknowledged publish is retried through a relist (default 30 s).
	PublishAckTimeout time.Duration
	// Compression asks the apiserver for gzip-compressed responses. Off by
	// default: the collector normally runs next to its apiserver, and on a
	// large initial list gzip costs the apiserver and the collector CPU for
	// nothing; turn it on across slow links.
	Compression bool
	// HubAPIPrefix, when set, is the JetStream API prefix under which the
	// collector's per-cluster NATS account reaches the hub's JetStream
	// (natsserver.APIPrefix). Such credentials may not create or
	// reconfigure streams and buckets: the hub creates them, the collector
	// binds to them. The connection must use the cluster's inbox prefix.
	HubAPIPrefix string
	// Replicas is the replica count of the cluster's stream and the
	// buckets when the collector creates them (without HubAPIPrefix):
	// 3 or 5 on a JetStream cluster. Default 1.
	Replicas int
	// StreamMaxBytes is the byte quota of the cluster's stream when the
	// collector creates it (without HubAPIPrefix; otherwise the hub
	// does). At the quota publishes are refused, reported on the
	// resources in the inventory and logged. 0: no quota.
	StreamMaxBytes int64
	// StreamDepth is the messages per object the cluster's stream keeps
	// when the collector creates or updates it (without HubAPIPrefix):
	// the hub's, set by `fleetview up` when its hub keeps history
	// (stream.EnsureStream). 0 leaves an existing stream's depth to the
	// hub, which raises it when it keeps history (stream.EnsureDepth).
	StreamDepth int
	Logger      *slog.Logger
}

// Collector mirrors one member cluster into its stream.
type Collector struct {
	cfg  Config
	log  *slog.Logger
	js   jetstream.JetStream
	kube kubernetes.Interface
	disc discovery.DiscoveryInterface
	// cached is the discovery cache behind rm: RESTMapping fills it, and
	// the short names and categories of wanted resources are read from it.
	cached discovery.CachedDiscoveryInterface
	rm     *restmapper.DeferredDiscoveryRESTMapper
	m      *metrics

	kick       chan struct{} // reconcile now (cluster info or served APIs changed)
	statusKick chan struct{} // registry status may need a write
	recordKick chan struct{} // a resource's sync state changed: write the inventory record now
	// published: something was published since the last
	// releaseHubRouteCache.
	published atomic.Bool
	// awaiting: a resource waits for NATS to be reachable again to relist
	// (reconnect.go).
	awaiting atomic.Bool
	// inflight maps each unacknowledged watch publish (*nats.Msg) to the
	// event it belongs to (*ackEntry), so its outcome moves the scope's
	// acknowledged resourceVersion (resume.go). A list's publishes are
	// not in it: a failed list relists.
	inflight sync.Map
	// pacer keeps the unacknowledged publishes to what the hub
	// acknowledges within its target latency.
	pacer   *pacer
	mu      sync.Mutex
	running map[schema.GroupVersionResource]*runningSync
	skipped []inventory.ResourceState
	names   map[schema.GroupVersionResource]apiNames // of the wanted resources, as last discovered
	results map[string]regResult                     // registry name -> what this cluster does for it
	// answered is each matching registry's generation whose resources
	// are running (set when reconcile has started them; the record's
	// Registries).
	answered    map[string]int64
	version     string
	served      []string
	info        registry.ClusterInfo
	infoMessage string
	// authorization is what the member's last SelfSubjectRulesReview
	// said of its authorizers (inventory.Cluster.Authorization).
	authorization string
	// orphansChecked is set once resources left in the stream by an earlier
	// run, and wanted by no registry any more, have been removed.
	orphansChecked bool
	// emptyAtStart: the cluster's stream held no message when this run
	// bound to it (a cluster new to the hub), so it has no orphans, and
	// a resource this run has not synced before has nothing to hydrate.
	// Each of those would be JetStream API requests to the hub, which a
	// fleet of new clusters makes all at once; they timed out by the
	// thousand at 2,000 clusters, and each retry added more.
	emptyAtStart bool
	// started are the resources this run started a sync of (c.mu).
	started map[schema.GroupVersionResource]bool
	// reconciled is closed after the first reconcile: the first
	// heartbeat waits for it (see heartbeat).
	reconciled     chan struct{}
	reconciledOnce sync.Once
}

// regResult is what this cluster does for one registry, for its status.
type regResult struct {
	matched   bool
	resources []string
	gvrs      []schema.GroupVersionResource
	skipped   []string
	// generation is the registry's, as reconciled.
	generation int64
	// wildcard, expanded, left: see expansion.
	wildcard bool
	expanded []string
	left     []string
}

type runningSync struct {
	rs     *resourceSync
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds a collector; nothing runs until Run.
func New(cfg Config) (*Collector, error) {
	if err := stream.ValidateCluster(cfg.Cluster); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.RecheckInterval <= 0 {
		cfg.RecheckInterval = 30 * time.Second
	}
	if cfg.DiscoveryInterval <= 0 {
		cfg.DiscoveryInterval = 5 * time.Second
	}
	if cfg.TombstoneTTL <= 0 {
		cfg.TombstoneTTL = stream.DefaultTombstoneTTL
	}
	if cfg.PublishAckTimeout <= 0 {
		cfg.PublishAckTimeout = 30 * time.Second
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.ClusterInfoConfigMap != "" {
		if _, _, err := ParseClusterInfoConfigMap(cfg.ClusterInfoConfigMap); err != nil {
			return nil, err
		}
	}
	rc := rest.CopyConfig(cfg.REST)
	// The initial list of a large cluster is the hot path; the client-side
	// limiter would throttle lists and discovery for no benefit.
	rc.QPS, rc.Burst = 200, 400
	rc.DisableCompression = !cfg.Compression
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Cluster, err)
	}
	cached := memory.NewMemCacheClient(kube.Discovery())
	c := &Collector{
		cfg: cfg, log: cfg.Logger.With("cluster", cfg.Cluster), kube: kube, disc: kube.Discovery(),
		cached:     cached,
		rm:         restmapper.NewDeferredDiscoveryRESTMapper(cached),
		m:          &metrics{},
		kick:       make(chan struct{}, 1),
		statusKick: make(chan struct{}, 1),
		recordKick: make(chan struct{}, 1),
		reconciled: make(chan struct{}),
		running:    map[schema.GroupVersionResource]*runningSync{},
		results:    map[string]regResult{},
		started:    map[schema.GroupVersionResource]bool{},
	}
	c.info = c.baseInfo()
	jsOpts := []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncErrHandler(c.onPublishError),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, msg *nats.Msg, _ *jetstream.PubAck) {
			c.pacer.done(msg, false)
			if e, ok := c.inflight.LoadAndDelete(msg); ok {
				e.(*ackEntry).resolve(true)
			}
		}),
		// The most unacknowledged publishes; the pacer keeps them to
		// what the hub acknowledges within pacerTarget. With 4,096, a
		// registry applied to 2,000 clusters of 500 objects put all 1M
		// objects in flight at once, so on a hub slower than 1M objects
		// per ack timeout the last acknowledgements came too late and
		// every cluster relisted (measured: docs/benchmarks/fleet.md#2000-clusters-x-500-pods-the-issues-scale-2026-12-04).
		// A full window stalls the publisher (WithStallWait).
		jetstream.WithPublishAsyncMaxPending(publishWindow),
		jetstream.WithPublishAsyncTimeout(cfg.PublishAckTimeout)}
	var js jetstream.JetStream
	if cfg.HubAPIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(cfg.NATS, cfg.HubAPIPrefix, jsOpts...)
	} else {
		js, err = jetstream.New(cfg.NATS, jsOpts...)
	}
	if err != nil {
		return nil, err
	}
	c.js = js
	c.pacer = newPacer(pacerTarget, minPublishWindow, publishWindow, cfg.PublishAckTimeout, js.PublishAsyncPending)
	return c, nil
}

func (c *Collector) baseInfo() registry.ClusterInfo {
	return registry.ClusterInfo{Name: c.cfg.Cluster, Labels: maps.Clone(c.cfg.Labels), Provider: c.cfg.Provider, Region: c.cfg.Region, Zone: c.cfg.Zone}
}

// Run blocks until ctx ends. Set-up is retried while NATS is unreachable.
// Shutdown order: stop resource syncs, flush pending publishes, mark the
// cluster not ready; the caller closes NATS afterwards.
func (c *Collector) Run(ctx context.Context) error {
	var regs *regstore.Store
	var inv jetstream.KeyValue
	b := backoff{max: 10 * time.Second}
	for {
		var err error
		if regs, inv, err = c.setup(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		c.m.hubRefused(err)
		c.log.Warn("set-up failed; retrying", "err", err)
		if !b.wait(ctx) {
			return nil
		}
	}
	c.refreshClusterInfo(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.heartbeat(gctx, inv) })
	follower := regs.Follow(c.followConfig())
	g.Go(func() error { return follower.Run(gctx) })
	g.Go(func() error { return c.watchRegistries(gctx, follower) })
	g.Go(func() error { return c.statusLoop(gctx, regs, follower) })
	g.Go(func() error { return c.relistOnReconnect(gctx) })
	err := g.Wait()
	c.stopAll()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := c.flush(fctx); ferr != nil {
		c.log.Warn("pending publishes not confirmed at shutdown; the next start reconciles them", "err", ferr)
	}
	rec := c.record(false, "collector stopped")
	if perr := inventory.Put(fctx, inv, rec); perr != nil {
		c.log.Warn("could not mark cluster stopped", "err", perr)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (c *Collector) setup(ctx context.Context) (*regstore.Store, jetstream.KeyValue, error) {
	st, err := c.bindStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Only this cluster's credentials publish to it (a second collector
	// of the same cluster during a rollout included, whose publishes a
	// later list of ours reconciles as it would after a hydrate).
	c.emptyAtStart = st.CachedInfo().State.Msgs == 0
	if c.cfg.HubAPIPrefix != "" {
		// Per-cluster credentials: bind to what the hub created.
		regs, err := regstore.Bind(ctx, c.js, c.cfg.Cluster)
		if err != nil {
			return nil, nil, err
		}
		inv, err := c.js.KeyValue(ctx, natsnames.ClusterBucket)
		if err != nil {
			return nil, nil, fmt.Errorf("bind %s bucket: %w", natsnames.ClusterBucket, err)
		}
		return regs, inv, nil
	}
	regs, err := regstore.Open(ctx, c.js, c.cfg.Replicas)
	if err != nil {
		return nil, nil, err
	}
	inv, err := inventory.Bucket(ctx, c.js, c.cfg.Replicas)
	if err != nil {
		return nil, nil, err
	}
	return regs, inv, nil
}

// bindStream binds to the cluster's stream: with per-cluster credentials
// the one the hub created, else created or updated here.
func (c *Collector) bindStream(ctx context.Context) (jetstream.Stream, error) {
	if c.cfg.HubAPIPrefix != "" {
		st, err := c.js.Stream(ctx, stream.StreamName(c.cfg.Cluster))
		if err != nil {
			return nil, fmt.Errorf("stream of %s (created by the hub for each cluster it has credentials for): %w", c.cfg.Cluster, err)
		}
		return st, nil
	}
	st, kept, err := stream.EnsureStream(ctx, c.js, c.cfg.Cluster, c.cfg.Replicas, c.cfg.StreamMaxBytes, c.cfg.StreamDepth)
	if err != nil {
		return nil, fmt.Errorf("create stream for %s: %w", c.cfg.Cluster, err)
	}
	if kept > 0 {
		c.log.Warn("the stream already holds more than its byte quota; the quota is raised to its size so nothing is dropped, and growth is refused", "stream", stream.StreamName(c.cfg.Cluster), "bytes", kept, "quota", c.cfg.StreamMaxBytes)
	}
	return st, nil
}

func (c *Collector) publish(ctx context.Context, msg *nats.Msg) error {
	if err := c.pacer.acquire(ctx, msg); err != nil {
		return fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	e := ackEntryFrom(ctx)
	if e != nil {
		e.add(msg)
		c.inflight.Store(msg, e)
	}
	_, err := c.js.PublishMsgAsync(msg, jetstream.WithStallWait(c.cfg.PublishAckTimeout))
	if err != nil {
		if _, ok := c.inflight.LoadAndDelete(msg); ok {
			// Failed at once (past the reconnect buffer, say): it must
			// not count as acknowledged, and the watch resumes.
			e.resolve(false)
		}
		c.pacer.abandon(msg)
		c.m.publishErrors.Add(1)
		return fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	c.published.Store(true)
	return nil
}

// flush waits until every publish is acknowledged or failed, then lets
// the hub forget the subjects published (releaseHubRouteCache).
func (c *Collector) flush(ctx context.Context) error {
	if err := c.awaitAcks(ctx); err != nil {
		return err
	}
	c.releaseHubRouteCache()
	return nil
}

// awaitAcks waits until every publish is acknowledged or failed. The pending
// count is polled besides PublishAsyncComplete: nats.go (v1.55) drops a
// publish whose retry after "no responders" cannot be sent (the
// connection reconnecting after its NATS server died) without closing
// the channel PublishAsyncComplete returned, so waiting on the channel
// alone can hang a resource's sync for good after a cluster failover.
func (c *Collector) awaitAcks(ctx context.Context) error {
	done := c.js.PublishAsyncComplete()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	warn := time.NewTimer(2*c.cfg.PublishAckTimeout + 5*time.Second)
	defer warn.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-poll.C:
			if c.js.PublishAsyncPending() == 0 {
				return nil
			}
		case <-warn.C:
			// Every publish has its own timeout, so this should never
			// show; if it does, the log says where a sync is stuck.
			c.log.Warn("publishes still pending past twice their acknowledgement timeout", "pending", c.js.PublishAsyncPending())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// awaitConnected returns once the NATS connection is up, or ctx ended.
func (c *Collector) awaitConnected(ctx context.Context) error {
	t := time.NewTicker(reconnectPoll)
	defer t.Stop()
	for c.cfg.NATS != nil && !c.cfg.NATS.IsConnected() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func (c *Collector) ackTimeout() time.Duration { return c.cfg.PublishAckTimeout }

// maxPayload is the largest message the connected server accepts.
func (c *Collector) maxPayload() int64 { return c.cfg.NATS.MaxPayload() }

func (c *Collector) statusChanged() {
	select {
	case c.statusKick <- struct{}{}:
	default:
	}
}

func (c *Collector) syncChanged() {
	select {
	case c.recordKick <- struct{}{}:
	default:
	}
}

// onPublishError makes a lost publish recoverable: the object is forgotten
// (a lost tombstone is remembered again) and its resource relisted, so the
// stream converges again.
func (c *Collector) onPublishError(_ jetstream.JetStream, msg *nats.Msg, err error) {
	c.pacer.done(msg, true)
	c.m.publishErrors.Add(1)
	ps, perr := stream.ParseSubject(msg.Subject)
	if perr != nil || ps.Control {
		return
	}
	var e *ackEntry
	if v, ok := c.inflight.LoadAndDelete(msg); ok {
		e = v.(*ackEntry)
	}
	c.mu.Lock()
	r := c.running[ps.GVR]
	c.mu.Unlock()
	if qe := stream.QuotaError(err); qe != nil {
		// Named apart from other failures: nothing fleetview does will fix
		// it, an operator must raise the quota or select fewer objects.
		c.m.quotaRefused.Add(1)
		c.log.Error("publish refused: the cluster's stream is full; its objects are cached incompletely until the hub's --stream-max-bytes is raised or registries select fewer objects",
			"stream", stream.StreamName(c.cfg.Cluster), "subject", msg.Subject, "err", qe)
	} else if e != nil {
		c.log.Warn("publish not acknowledged; the watch resumes from its last acknowledged resourceVersion", "subject", msg.Subject, "err", err)
	} else {
		c.log.Warn("publish not acknowledged; relisting", "subject", msg.Subject, "err", err)
	}
	if r != nil {
		r.rs.publishFailed(ps.UID, msg.Header, err, e)
	} else if e != nil {
		e.resolve(false)
	}
}
