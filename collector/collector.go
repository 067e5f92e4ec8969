package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
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
	// HeartbeatInterval is how often the inventory record is refreshed.
	HeartbeatInterval time.Duration
	// RecheckInterval is how often resources skipped as not served are looked
	// up again, so an API that appears later (a CRD installed) is picked up.
	RecheckInterval time.Duration
	TombstoneTTL    time.Duration
	Logger          *slog.Logger
}

// Collector mirrors one member cluster into its stream.
type Collector struct {
	cfg  Config
	log  *slog.Logger
	js   jetstream.JetStream
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	rm   *restmapper.DeferredDiscoveryRESTMapper

	mu      sync.Mutex
	running map[schema.GroupVersionResource]*runningSync
	skipped []inventory.ResourceState
	version string
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
	rc := rest.CopyConfig(cfg.REST)
	// The initial list of a large cluster is the hot path; the client-side
	// limiter would throttle reflectors and discovery for no benefit.
	rc.QPS, rc.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Cluster, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Cluster, err)
	}
	c := &Collector{
		cfg: cfg, log: cfg.Logger.With("cluster", cfg.Cluster), dyn: dyn, disc: disc,
		rm:      restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		running: map[schema.GroupVersionResource]*runningSync{},
	}
	js, err := jetstream.New(cfg.NATS, jetstream.WithPublishAsyncErrHandler(c.onPublishError), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	c.js = js
	return c, nil
}

// Run blocks until ctx ends. Shutdown order: stop reflectors, flush pending
// publishes, mark the cluster not ready; the caller closes NATS afterwards.
func (c *Collector) Run(ctx context.Context) error {
	if _, err := c.js.CreateOrUpdateStream(ctx, stream.StreamConfig(c.cfg.Cluster, 1)); err != nil {
		return fmt.Errorf("create stream for %s: %w", c.cfg.Cluster, err)
	}
	regs, err := regstore.Open(ctx, c.js)
	if err != nil {
		return err
	}
	inv, err := inventory.Bucket(ctx, c.js)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.heartbeat(gctx, inv) })
	g.Go(func() error { return c.watchRegistries(gctx, regs) })
	err = g.Wait()
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

func (c *Collector) publish(_ context.Context, msg *nats.Msg) error {
	_, err := c.js.PublishMsgAsync(msg)
	if err != nil {
		return fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	return nil
}

func (c *Collector) flush(ctx context.Context) error {
	select {
	case <-c.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onPublishError makes a lost publish recoverable: the object is forgotten
// and its resource relisted, so the stream converges again.
func (c *Collector) onPublishError(_ jetstream.JetStream, msg *nats.Msg, err error) {
	ps, perr := stream.ParseSubject(msg.Subject)
	if perr != nil || ps.Control {
		return
	}
	c.mu.Lock()
	r := c.running[ps.GVR]
	c.mu.Unlock()
	c.log.Warn("publish not acknowledged", "subject", msg.Subject, "err", err)
	if r != nil {
		r.rs.forget(ps.UID)
	}
}

func (c *Collector) watchRegistries(ctx context.Context, regs *regstore.Store) error {
	w, err := regs.KV().WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch registries: %w", err)
	}
	defer func() { _ = w.Stop() }()
	initial := true
	recheck := time.NewTicker(c.cfg.RecheckInterval)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("registry watch closed")
			}
			if e == nil {
				initial = false
			}
			if initial {
				continue // reconcile once the initial values are in
			}
		case <-recheck.C:
			c.mu.Lock()
			n := len(c.skipped)
			c.mu.Unlock()
			if n == 0 {
				continue
			}
			c.rm.Reset()
		}
		if err := c.reconcile(ctx, regs); err != nil {
			c.log.Error("reconcile failed", "err", err)
		}
	}
}

func (c *Collector) self() registry.ClusterInfo {
	return registry.ClusterInfo{Name: c.cfg.Cluster, Labels: c.cfg.Labels, Provider: c.cfg.Provider, Region: c.cfg.Region, Zone: c.cfg.Zone}
}

// desired is the union, over every registry matching this cluster, of the
// resources to cache. Several selectors of one resource merge their namespace
// scopes, so nothing is published twice.
func (c *Collector) desired(ctx context.Context, regs *regstore.Store) (map[schema.GroupVersionResource]want, []inventory.ResourceState, error) {
	list, err := regs.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := map[schema.GroupVersionResource]want{}
	allNS := map[schema.GroupVersionResource]bool{}
	nsSets := map[schema.GroupVersionResource]map[string]bool{}
	var skipped []inventory.ResourceState
	for _, r := range list {
		for _, sel := range r.SelectorsFor(c.self()) {
			gvk := sel.GroupVersionKind()
			m, err := c.rm.RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				skipped = append(skipped, inventory.ResourceState{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
					Message: fmt.Sprintf("%s: %s (registry %s)", ErrNotServed, gvk.String(), r.Name)})
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("resolve %s: %w", gvk, err)
			}
			w := out[m.Resource]
			w.gvr, w.kind = m.Resource, gvk.Kind
			w.namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
			w.keepSecretData = w.keepSecretData || r.Spec.IncludeSecretData
			if sel.Namespace == "" {
				allNS[m.Resource] = true
			} else {
				if nsSets[m.Resource] == nil {
					nsSets[m.Resource] = map[string]bool{}
				}
				nsSets[m.Resource][sel.Namespace] = true
			}
			out[m.Resource] = w
		}
	}
	for gvr, w := range out {
		if !allNS[gvr] && w.namespaced {
			w.namespaces = []string{}
			for ns := range nsSets[gvr] {
				w.namespaces = append(w.namespaces, ns)
			}
			sort.Strings(w.namespaces)
			out[gvr] = w
		}
	}
	return out, skipped, nil
}

// reconcile starts and stops only the resource syncs whose wants changed.
func (c *Collector) reconcile(ctx context.Context, regs *regstore.Store) error {
	wanted, skipped, err := c.desired(ctx, regs)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.skipped = skipped
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
	for _, r := range stop {
		r.cancel()
		<-r.done
	}
	for _, w := range removed {
		if err := c.removeResource(ctx, w); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, w := range wanted {
		if _, ok := c.running[gvr]; ok {
			continue
		}
		rs := newResourceSync(c.cfg.Cluster, w, c.dyn, c.js, c, c.log, c.cfg.TombstoneTTL)
		rctx, cancel := context.WithCancel(ctx)
		r := &runningSync{rs: rs, cancel: cancel, done: make(chan struct{})}
		c.running[gvr] = r
		go func() {
			defer close(r.done)
			if err := rs.Run(rctx); err != nil {
				rs.setErr(err)
				c.log.Error("resource sync stopped", "gvr", gvr.String(), "err", err)
			}
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

func (c *Collector) heartbeat(ctx context.Context, kv jetstream.KeyValue) error {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		ready, msg := true, ""
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.serverVersion(vctx)
		cancel()
		if err != nil {
			ready, msg = false, "member apiserver unreachable: "+err.Error()
		} else {
			c.mu.Lock()
			c.version = v
			c.mu.Unlock()
		}
		if err := inventory.Put(ctx, kv, c.record(ready, msg)); err != nil && ctx.Err() == nil {
			c.log.Warn("heartbeat not written", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
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

func (c *Collector) record(ready bool, msg string) *inventory.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := &inventory.Cluster{
		Name: c.cfg.Cluster, Labels: c.cfg.Labels, Provider: c.cfg.Provider, Region: c.cfg.Region, Zone: c.cfg.Zone,
		KubernetesVersion: c.version, Ready: ready, Message: msg, Heartbeat: time.Now().UTC(),
	}
	for _, r := range c.running {
		w := r.rs.w
		rec.Resources = append(rec.Resources, inventory.ResourceState{
			Group: w.gvr.Group, Version: w.gvr.Version, Resource: w.gvr.Resource, Kind: w.kind,
			Namespaces: w.namespaces, Synced: r.rs.synced.Load(), ObjectCount: r.rs.count.Load(),
		})
	}
	rec.Resources = append(rec.Resources, c.skipped...)
	sort.Slice(rec.Resources, func(i, j int) bool {
		a, b := rec.Resources[i], rec.Resources[j]
		return a.Group+"/"+a.Version+"/"+a.Resource+"/"+a.Kind < b.Group+"/"+b.Version+"/"+b.Resource+"/"+b.Kind
	})
	return rec
}
