package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
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
	TombstoneTTL    time.Duration
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
	Logger         *slog.Logger
}

// Collector mirrors one member cluster into its stream.
type Collector struct {
	cfg  Config
	log  *slog.Logger
	js   jetstream.JetStream
	dyn  dynamic.Interface
	kube kubernetes.Interface
	disc discovery.DiscoveryInterface
	// cached is the discovery cache behind rm: RESTMapping fills it, and
	// the short names and categories of wanted resources are read from it.
	cached discovery.CachedDiscoveryInterface
	rm     *restmapper.DeferredDiscoveryRESTMapper
	m      *metrics

	kick        chan struct{} // reconcile now (cluster info or served APIs changed)
	statusKick  chan struct{} // registry status may need a write
	mu          sync.Mutex
	running     map[schema.GroupVersionResource]*runningSync
	skipped     []inventory.ResourceState
	names       map[schema.GroupVersionResource]apiNames // of the wanted resources, as last discovered
	results     map[string]regResult                     // registry name -> what this cluster does for it
	version     string
	served      []string
	info        registry.ClusterInfo
	infoMessage string
	// orphansChecked is set once resources left in the stream by an earlier
	// run, and wanted by no registry any more, have been removed.
	orphansChecked bool
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
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Cluster, err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Cluster, err)
	}
	cached := memory.NewMemCacheClient(kube.Discovery())
	c := &Collector{
		cfg: cfg, log: cfg.Logger.With("cluster", cfg.Cluster), dyn: dyn, kube: kube, disc: kube.Discovery(),
		cached:     cached,
		rm:         restmapper.NewDeferredDiscoveryRESTMapper(cached),
		m:          &metrics{},
		kick:       make(chan struct{}, 1),
		statusKick: make(chan struct{}, 1),
		reconciled: make(chan struct{}),
		running:    map[schema.GroupVersionResource]*runningSync{},
		results:    map[string]regResult{},
	}
	c.info = c.baseInfo()
	jsOpts := []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncErrHandler(c.onPublishError),
		jetstream.WithPublishAsyncMaxPending(4096),
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
	g.Go(func() error { return c.watchRegistries(gctx, regs) })
	g.Go(func() error { return c.statusLoop(gctx, regs) })
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
	if c.cfg.HubAPIPrefix != "" {
		// Per-cluster credentials: bind to what the hub created.
		if _, err := c.js.Stream(ctx, stream.StreamName(c.cfg.Cluster)); err != nil {
			return nil, nil, fmt.Errorf("stream of %s (created by the hub for each cluster it has credentials for): %w", c.cfg.Cluster, err)
		}
		regs, err := regstore.Bind(ctx, c.js, c.cfg.Cluster)
		if err != nil {
			return nil, nil, err
		}
		inv, err := c.js.KeyValue(ctx, stream.ClusterBucket)
		if err != nil {
			return nil, nil, fmt.Errorf("bind %s bucket: %w", stream.ClusterBucket, err)
		}
		return regs, inv, nil
	}
	kept, err := stream.EnsureStream(ctx, c.js, c.cfg.Cluster, c.cfg.Replicas, c.cfg.StreamMaxBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("create stream for %s: %w", c.cfg.Cluster, err)
	}
	if kept > 0 {
		c.log.Warn("the stream already holds more than its byte quota; the quota is raised to its size so nothing is dropped, and growth is refused", "stream", stream.StreamName(c.cfg.Cluster), "bytes", kept, "quota", c.cfg.StreamMaxBytes)
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

func (c *Collector) publish(_ context.Context, msg *nats.Msg) error {
	_, err := c.js.PublishMsgAsync(msg, jetstream.WithStallWait(c.cfg.PublishAckTimeout))
	if err != nil {
		c.m.publishErrors.Add(1)
		return fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	return nil
}

// flush waits until every publish is acknowledged or failed. The pending
// count is polled besides PublishAsyncComplete: nats.go (v1.55) drops a
// publish whose retry after "no responders" cannot be sent (the
// connection reconnecting after its NATS server died) without closing
// the channel PublishAsyncComplete returned, so waiting on the channel
// alone can hang a resource's sync for good after a cluster failover.
func (c *Collector) flush(ctx context.Context) error {
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

// maxPayload is the largest message the connected server accepts.
func (c *Collector) maxPayload() int64 { return c.cfg.NATS.MaxPayload() }

func (c *Collector) statusChanged() {
	select {
	case c.statusKick <- struct{}{}:
	default:
	}
}

// onPublishError makes a lost publish recoverable: the object is forgotten
// (a lost tombstone is remembered again) and its resource relisted, so the
// stream converges again.
func (c *Collector) onPublishError(_ jetstream.JetStream, msg *nats.Msg, err error) {
	c.m.publishErrors.Add(1)
	ps, perr := stream.ParseSubject(msg.Subject)
	if perr != nil || ps.Control {
		return
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
	} else {
		c.log.Warn("publish not acknowledged; relisting", "subject", msg.Subject, "err", err)
	}
	if r != nil {
		r.rs.publishFailed(ps.UID, msg.Header, err)
	}
}

// watchRegistries reconciles on every registry change, on a change of the
// cluster's own description, and every RecheckInterval while a selected
// resource is not served. A closed watch (NATS restarted) is re-opened.
func (c *Collector) watchRegistries(ctx context.Context, regs *regstore.Store) error {
	recheck := time.NewTicker(c.cfg.RecheckInterval)
	defer recheck.Stop()
	b := backoff{max: 10 * time.Second}
	for {
		w, err := regs.Watch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.m.hubRefused(err)
			c.log.Warn("watch registries failed; retrying", "err", err)
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		err = c.followRegistries(ctx, regs, w, recheck.C)
		_ = w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Warn("registry watch ended; re-opening", "err", err)
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

func (c *Collector) followRegistries(ctx context.Context, regs *regstore.Store, w jetstream.KeyWatcher, recheck <-chan time.Time) error {
	initial := true
	var retry <-chan time.Time
	var retryIn time.Duration
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("registry watch closed")
			}
			if e == nil {
				initial = false
			}
			if initial {
				continue // reconcile once the initial values are in
			}
		case <-c.kick:
		case <-retry:
		case <-recheck:
			c.mu.Lock()
			n := len(c.skipped)
			c.mu.Unlock()
			if n == 0 {
				continue
			}
			c.rm.Reset()
		}
		if err := c.reconcile(ctx, regs); err != nil {
			// Retried on its own: a NATS error while a cluster elects a
			// leader (reading the registries) is transient, and waiting
			// for the next registry change could mean never syncing.
			retryIn = min(max(2*retryIn, 500*time.Millisecond), 10*time.Second)
			retry = time.After(retryIn)
			c.m.hubRefused(err)
			c.log.Error("reconcile failed; retrying", "err", err, "in", retryIn)
		} else {
			retry, retryIn = nil, 0
		}
		c.reconciledOnce.Do(func() { close(c.reconciled) })
	}
}

func (c *Collector) self() registry.ClusterInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// desired is the union, over every registry matching this cluster, of the
// resources to cache. Several selectors of one resource merge their namespace
// scopes, so nothing is published twice.
func (c *Collector) desired(ctx context.Context, regs *regstore.Store) (map[schema.GroupVersionResource]want, []inventory.ResourceState, map[string]regResult, error) {
	list, err := regs.Specs(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return c.wants(list)
}

// wants computes desired from the registries' specs. Secret data is kept
// only where a registry that opted in selects Secrets (its namespace
// selectors, in the clusters it targets): another registry watching
// Secrets in more namespaces, metadata-only, does not inherit the opt-in.
func (c *Collector) wants(list []*registry.ResourceRegistry) (map[schema.GroupVersionResource]want, []inventory.ResourceState, map[string]regResult, error) {
	self := c.self()
	out := map[schema.GroupVersionResource]want{}
	allNS := map[schema.GroupVersionResource]bool{}
	nsSets := map[schema.GroupVersionResource]map[string]bool{}
	dataNS := map[schema.GroupVersionResource]map[string]bool{}
	results := map[string]regResult{}
	var skipped []inventory.ResourceState
	for _, r := range list {
		sels := r.SelectorsFor(self)
		res := regResult{matched: len(sels) > 0}
		for _, sel := range sels {
			gvk := sel.GroupVersionKind()
			m, err := c.rm.RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				skipped = append(skipped, inventory.ResourceState{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
					Message: fmt.Sprintf("%s: %s (registry %s)", ErrNotServed, gvk.String(), r.Name)})
				res.skipped = append(res.skipped, describeGVK(gvk))
				continue
			}
			if err != nil {
				return nil, nil, nil, fmt.Errorf("resolve %s: %w", gvk, err)
			}
			w := out[m.Resource]
			w.gvr, w.kind = m.Resource, gvk.Kind
			w.names = discoveryNames(c.cached, m.Resource)
			w.namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
			scope := "all namespaces"
			if sel.Namespace == "" || !w.namespaced {
				allNS[m.Resource] = true
				w.secretData.all = w.secretData.all || r.Spec.IncludeSecretData
				if !w.namespaced {
					scope = "cluster-scoped"
				}
			} else {
				if nsSets[m.Resource] == nil {
					nsSets[m.Resource] = map[string]bool{}
				}
				nsSets[m.Resource][sel.Namespace] = true
				if r.Spec.IncludeSecretData {
					if dataNS[m.Resource] == nil {
						dataNS[m.Resource] = map[string]bool{}
					}
					dataNS[m.Resource][sel.Namespace] = true
				}
				scope = "namespace " + sel.Namespace
			}
			out[m.Resource] = w
			res.resources = append(res.resources, describeGVR(m.Resource)+" ("+scope+")")
			res.gvrs = append(res.gvrs, m.Resource)
		}
		results[r.Name] = res
	}
	for gvr, w := range out {
		if !allNS[gvr] && w.namespaced {
			w.namespaces = []string{}
			for ns := range nsSets[gvr] {
				w.namespaces = append(w.namespaces, ns)
			}
			sort.Strings(w.namespaces)
		}
		if !w.secretData.all && len(dataNS[gvr]) > 0 {
			for ns := range dataNS[gvr] {
				w.secretData.namespaces = append(w.secretData.namespaces, ns)
			}
			sort.Strings(w.secretData.namespaces)
		}
		out[gvr] = w
	}
	return out, skipped, results, nil
}

// discoveryNames are the short names and categories disc reports for gvr.
// They are read from the discovery cache RESTMapping has just filled, so
// they are as fresh as the mapping: an edit of a CRD's short names shows
// when that cache is next refreshed (while a skipped resource is rechecked,
// or at a restart), and never restarts a sync.
// A discovery error leaves them empty (the query API then falls back to its
// table of Kubernetes' own), since they only help clients name the resource.
func discoveryNames(disc discovery.DiscoveryInterface, gvr schema.GroupVersionResource) apiNames {
	l, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil || l == nil {
		return apiNames{}
	}
	for _, r := range l.APIResources {
		if r.Name == gvr.Resource {
			return apiNames{shortNames: slices.Clone(r.ShortNames), categories: slices.Clone(r.Categories)}
		}
	}
	return apiNames{}
}

func describeGVR(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "/" + gvr.Version
	}
	return gvr.Resource + "." + gvr.Group + "/" + gvr.Version
}

func describeGVK(gvk schema.GroupVersionKind) string {
	return gvk.Kind + " " + gvk.GroupVersion().String()
}

// reconcile starts and stops only the resource syncs whose wants changed.
func (c *Collector) reconcile(ctx context.Context, regs *regstore.Store) error {
	wanted, skipped, results, err := c.desired(ctx, regs)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.skipped = skipped
	c.results = results
	c.names = map[schema.GroupVersionResource]apiNames{}
	for gvr, w := range wanted {
		c.names[gvr] = w.names
	}
	var stop []*runningSync
	var removed []want
	for gvr, r := range c.running {
		w, ok := wanted[gvr]
		if ok && w.equal(r.rs.w) {
			continue
		}
		stop = append(stop, r)
		delete(c.running, gvr)
		if !ok {
			removed = append(removed, r.rs.w)
		}
	}
	c.mu.Unlock()
	c.statusChanged()
	for _, r := range stop {
		r.cancel()
		<-r.done
	}
	for _, w := range removed {
		if err := c.removeResource(ctx, w); err != nil {
			return err
		}
	}
	if !c.orphansChecked {
		if err := c.removeOrphans(ctx, wanted); err != nil {
			return err
		}
		c.orphansChecked = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, w := range wanted {
		if _, ok := c.running[gvr]; ok {
			continue
		}
		rs := newResourceSync(resourceSyncConfig{
			cluster: c.cfg.Cluster, w: w, dyn: c.dyn, raw: c.kube.CoreV1().RESTClient(), js: c.js, pub: c,
			log: c.log, ttl: c.cfg.TombstoneTTL, pageSize: c.cfg.PageSize, m: c.m,
		})
		rctx, cancel := context.WithCancel(ctx)
		r := &runningSync{rs: rs, cancel: cancel, done: make(chan struct{})}
		c.running[gvr] = r
		go func() {
			defer close(r.done)
			_ = rs.Run(rctx)
		}()
		c.log.Info("caching resource", "gvr", gvr.String(), "namespaces", strings.Join(w.namespaces, ","))
	}
	return nil
}

// removeResource tells consumers to drop the resource, then purges its
// subjects so a replay does not bring the objects back.
func (c *Collector) removeResource(ctx context.Context, w want) error {
	if err := publishControl(ctx, c.js, c.cfg.Cluster, w, fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED); err != nil {
		return err
	}
	st, err := c.js.Stream(ctx, stream.StreamName(c.cfg.Cluster))
	if err != nil {
		return err
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(stream.ResourceFilter(c.cfg.Cluster, w.gvr))); err != nil {
		return fmt.Errorf("purge %s: %w", w.gvr, err)
	}
	c.log.Info("resource no longer cached; removed", "gvr", w.gvr.String())
	return nil
}

// removeOrphans removes resources an earlier run cached that no registry
// wants any more: a registry deleted or edited while the collector was down
// must not leave its objects in the stream. Every resource that was ever
// synced has a control subject whose last event says whether it was removed.
func (c *Collector) removeOrphans(ctx context.Context, wanted map[schema.GroupVersionResource]want) error {
	st, err := c.js.Stream(ctx, stream.StreamName(c.cfg.Cluster))
	if err != nil {
		return err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(stream.SubjectRoot+".ctl."+c.cfg.Cluster+".>"))
	if err != nil {
		return err
	}
	for subj := range info.State.Subjects {
		ps, err := stream.ParseSubject(subj)
		if err != nil || !ps.Control {
			continue
		}
		if _, ok := wanted[ps.GVR]; ok {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return err
		}
		ev, err := stream.Decode(m.Subject, m.Data)
		if err != nil {
			return err
		}
		if ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			continue
		}
		c.log.Info("resource cached by an earlier run is wanted by no registry; removing", "gvr", ps.GVR.String())
		if err := c.removeResource(ctx, want{gvr: ps.GVR, kind: ev.GetKind(), namespaced: ev.GetNamespaced()}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Collector) stopAll() {
	c.mu.Lock()
	rs := make([]*runningSync, 0, len(c.running))
	for _, r := range c.running {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	for _, r := range rs {
		r.cancel()
		<-r.done
	}
}

// statusLoop writes this cluster's conditions on every registry whenever
// they may have changed. Each cluster writes only its own status keys
// (store.SetClusterStatus, revision-checked), so collectors of other
// clusters never touch them, and an unchanged status is not written.
func (c *Collector) statusLoop(ctx context.Context, regs *regstore.Store) error {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.statusKick:
		case <-retry.C:
		}
		if err := c.writeStatus(ctx, regs); err != nil && ctx.Err() == nil {
			c.m.hubRefused(err)
			c.log.Warn("registry status not written; retrying", "err", err)
			retry.Reset(2 * time.Second)
		}
	}
}

func (c *Collector) writeStatus(ctx context.Context, regs *regstore.Store) error {
	list, err := regs.Specs(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	results := maps.Clone(c.results)
	refused := map[schema.GroupVersionResource][]string{}
	for gvr, r := range c.running {
		if objs := r.rs.refusedObjects(); len(objs) > 0 {
			refused[gvr] = objs
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, r := range list {
		conds := c.conditions(results[r.Name], refused)
		if err := regs.SetClusterStatus(ctx, r, c.cfg.Cluster, conds); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// conditions are this cluster's conditions for one registry; nil when the
// cluster does not match it (its conditions are then removed).
func (c *Collector) conditions(res regResult, refused map[schema.GroupVersionResource][]string) []metav1.Condition {
	if !res.matched {
		return nil
	}
	cl := c.cfg.Cluster
	what := "nothing yet"
	if len(res.resources) > 0 {
		what = strings.Join(res.resources, "; ")
	}
	conds := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched,
		Message: fmt.Sprintf("cluster %s caches: %s", cl, what)}}
	served := metav1.Condition{Type: registry.ClusterAPIsServed, Status: metav1.ConditionTrue, Reason: registry.ReasonAllServed,
		Message: fmt.Sprintf("cluster %s serves every selected resource", cl)}
	if len(res.skipped) > 0 {
		served.Status, served.Reason = metav1.ConditionFalse, registry.ReasonNotServed
		served.Message = fmt.Sprintf("cluster %s does not serve %s; skipped, looked up again every %s", cl, strings.Join(res.skipped, ", "), c.cfg.RecheckInterval)
	}
	pub := metav1.Condition{Type: registry.ClusterPublished, Status: metav1.ConditionTrue, Reason: registry.ReasonAllPublished,
		Message: fmt.Sprintf("cluster %s publishes every selected object", cl)}
	var bad []string
	n := 0
	for _, gvr := range res.gvrs {
		objs := refused[gvr]
		n += len(objs)
		for _, o := range objs {
			if len(bad) < 10 {
				bad = append(bad, describeGVR(gvr)+" "+o)
			}
		}
	}
	if n > 0 {
		pub.Status, pub.Reason = metav1.ConditionFalse, registry.ReasonObjectsRefused
		pub.Message = fmt.Sprintf("cluster %s refused %d object(s) too large for NATS: %s", cl, n, strings.Join(bad, "; "))
	}
	return append(conds, served, pub)
}

func (c *Collector) heartbeat(ctx context.Context, kv jetstream.KeyValue) error {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	// The first record waits for the first reconcile (at most one
	// interval). Written before it, the record would list no resources
	// and replace the previous run's, and the Kubernetes API, which
	// serves the resources the inventory lists, would answer 404 for
	// every cached resource until the next heartbeat: after a restart
	// every informer would list again instead of resuming its watch.
	select {
	case <-c.reconciled:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		ready, msg := true, ""
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.serverVersion(vctx)
		var served []string
		if err == nil {
			served, err = c.servedAPIs(vctx)
		}
		cancel()
		if err != nil {
			ready, msg = false, "member apiserver unreachable: "+err.Error()
		} else {
			c.mu.Lock()
			changed := !slices.Equal(c.served, served)
			c.version, c.served = v, served
			skipped := len(c.skipped)
			c.mu.Unlock()
			if changed && skipped > 0 {
				c.rm.Reset()
				c.reconcileSoon()
			}
			c.refreshClusterInfo(ctx)
		}
		if err := inventory.Put(ctx, kv, c.record(ready, msg)); err != nil && ctx.Err() == nil {
			c.m.hubRefused(err)
			c.log.Warn("heartbeat not written", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Collector) reconcileSoon() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Collector) serverVersion(ctx context.Context) (string, error) {
	body, err := c.disc.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// servedAPIs lists the group/versions the member cluster serves ("v1" for
// the core group), sorted.
func (c *Collector) servedAPIs(ctx context.Context) ([]string, error) {
	var out []string
	var core metav1.APIVersions
	if err := c.disc.RESTClient().Get().AbsPath("/api").Do(ctx).Into(&core); err != nil {
		return nil, err
	}
	out = append(out, core.Versions...)
	var groups metav1.APIGroupList
	if err := c.disc.RESTClient().Get().AbsPath("/apis").Do(ctx).Into(&groups); err != nil {
		return nil, err
	}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			out = append(out, v.GroupVersion)
		}
	}
	sort.Strings(out)
	return out, nil
}

// refreshClusterInfo merges the cluster-info ConfigMap into the flags'
// description and triggers a reconcile when the result changed, since
// ClusterAffinity is evaluated against it.
func (c *Collector) refreshClusterInfo(ctx context.Context) {
	if c.cfg.ClusterInfoConfigMap == "" {
		return
	}
	ns, name, err := ParseClusterInfoConfigMap(c.cfg.ClusterInfoConfigMap)
	if err != nil {
		return // New refused it already
	}
	info := c.baseInfo()
	msg := ""
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(cctx, name, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		// No ConfigMap: the flags alone describe the cluster.
	case err != nil:
		msg = fmt.Sprintf("cluster info ConfigMap %s: %v", c.cfg.ClusterInfoConfigMap, err)
		c.mu.Lock()
		info = c.info // keep what we had rather than flap on a transient error
		c.mu.Unlock()
	default:
		var perr error
		info, perr = mergeClusterInfo(info, cm.Data)
		if perr != nil {
			msg = fmt.Sprintf("cluster info ConfigMap %s: %v", c.cfg.ClusterInfoConfigMap, perr)
		}
	}
	c.mu.Lock()
	changed := !sameInfo(c.info, info)
	newMsg := msg != c.infoMessage
	c.info, c.infoMessage = info, msg
	c.mu.Unlock()
	if msg != "" && newMsg { // once per distinct problem, not every heartbeat
		c.log.Warn("cluster info", "err", msg)
	}
	if changed {
		c.log.Info("cluster description changed", "labels", info.Labels, "provider", info.Provider, "region", info.Region, "zone", info.Zone)
		c.reconcileSoon()
	}
}

func sameInfo(a, b registry.ClusterInfo) bool {
	return a.Name == b.Name && a.Provider == b.Provider && a.Region == b.Region && a.Zone == b.Zone && maps.Equal(a.Labels, b.Labels)
}

func (c *Collector) record(ready bool, msg string) *inventory.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.infoMessage != "" {
		msg = strings.TrimPrefix(msg+"; "+c.infoMessage, "; ")
	}
	hub := c.m.hubRefusals()
	if hub != nil {
		// In the message too: the query API's cluster list shows it.
		msg = strings.TrimPrefix(fmt.Sprintf("%s; the hub refused %d request(s) over this cluster's quota since the collector started, the last at %s: %s",
			msg, hub.Count, hub.LastTime.Format(time.RFC3339), hub.Last), "; ")
	}
	rec := &inventory.Cluster{
		Name: c.cfg.Cluster, Labels: c.info.Labels, Provider: c.info.Provider, Region: c.info.Region, Zone: c.info.Zone,
		KubernetesVersion: c.version, ServedAPIs: c.served, Ready: ready, Message: msg, Heartbeat: time.Now().UTC(),
		Counters: c.m.snapshot(), HubRefusals: hub,
	}
	for _, r := range c.running {
		w := r.rs.w
		names := c.names[w.gvr]
		st := inventory.ResourceState{
			Group: w.gvr.Group, Version: w.gvr.Version, Resource: w.gvr.Resource, Kind: w.kind, Namespaced: w.namespaced,
			ShortNames: names.shortNames, Categories: names.categories,
			Namespaces: w.namespaces, Synced: r.rs.synced.Load(), ObjectCount: r.rs.count.Load(),
			SecretData: w.keepsAnyData(),
		}
		if err := r.rs.lastErr(); err != nil {
			st.Message = err.Error()
		}
		if refused := r.rs.refusedObjects(); len(refused) > 0 {
			st.RefusedObjects = int64(len(refused))
			st.Message = strings.TrimPrefix(st.Message+"; "+fmt.Sprintf("%d object(s) refused as too large", len(refused)), "; ")
		}
		rec.Resources = append(rec.Resources, st)
	}
	rec.Resources = append(rec.Resources, c.skipped...)
	sort.Slice(rec.Resources, func(i, j int) bool {
		a, b := rec.Resources[i], rec.Resources[j]
		return a.Group+"/"+a.Version+"/"+a.Resource+"/"+a.Kind < b.Group+"/"+b.Version+"/"+b.Resource+"/"+b.Kind
	})
	return rec
}
