package collector

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// watchRegistries reconciles on every registry change the follower reports
// (it holds every registry: internal/registry/store's Follower, one
// subscription on the registries' republish and a snapshot when it cannot
// trust its copy, so a change costs the hub no consumer per collector), on
// a change of the cluster's own description, and every RecheckInterval
// while a selected resource is not served. Nothing is reconciled before
// the follower's first snapshot.
func (c *Collector) watchRegistries(ctx context.Context, regs *regstore.Follower) error {
	recheck := time.NewTicker(c.cfg.RecheckInterval)
	defer recheck.Stop()
	follow := time.NewTicker(c.cfg.DiscoveryInterval)
	defer follow.Stop()
	initial := true
	var retry <-chan time.Time
	var retryIn time.Duration
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-regs.Changed():
			initial = false
		case <-c.kick:
		case <-retry:
		case <-recheck.C:
			c.mu.Lock()
			n := len(c.skipped)
			c.mu.Unlock()
			if n == 0 {
				continue
			}
			c.rm.Reset()
		case <-follow.C:
			if !c.followsDiscovery() {
				continue
			}
			// A wildcard stands for what the member serves now: a CRD
			// installed starts syncing, one removed stops and its
			// objects leave the cache (removeResource).
			c.rm.Reset()
		}
		if initial {
			continue // reconcile once the registries are read
		}
		if err := c.reconcile(ctx, regs); err != nil {
			// Retried on its own: a removal's NATS requests (while a
			// cluster elects a leader) and the member's discovery fail
			// transiently, and waiting for the next registry change
			// could mean never syncing.
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

// followConfig is how the collector's registries follower reports.
func (c *Collector) followConfig() regstore.FollowConfig {
	return regstore.FollowConfig{
		OnError: func(err error) {
			c.m.hubRefused(err)
			c.log.Warn("following the registries failed; retrying", "err", err)
		},
		OnSnapshot: func(reason string) {
			c.log.Debug("reading every registry", "why", reason)
		},
	}
}

// followsDiscovery reports whether a registry this cluster matches has a
// wildcard selector, whose kinds follow the member's discovery.
func (c *Collector) followsDiscovery() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.results {
		if r.wildcard {
			return true
		}
	}
	return false
}

func (c *Collector) self() registry.ClusterInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// desired is the union, over every registry matching this cluster, of the
// resources to cache. Several selectors of one resource merge their namespace
// scopes, so nothing is published twice.
func (c *Collector) desired(regs *regstore.Follower) (map[schema.GroupVersionResource]want, []inventory.ResourceState, map[string]regResult, error) {
	list, err := regs.Specs()
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
		ex, err := expand(c.cached, sels)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("registry %s: %w", r.Name, err)
		}
		res := regResult{matched: len(sels) > 0, generation: r.Generation, wildcard: ex.wildcard, expanded: ex.expanded, left: ex.left}
		for _, sel := range ex.exact {
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
func (c *Collector) reconcile(ctx context.Context, regs *regstore.Follower) error {
	wanted, skipped, results, err := c.desired(regs)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.skipped = skipped
	for name, r := range results {
		// What a wildcard stands for changes with the member's
		// discovery; the log says so when it does, with what it costs.
		if old := c.results[name]; r.wildcard && !slices.Equal(old.expanded, r.expanded) {
			c.log.Info("wildcard selectors expanded; each kind is one list and watch of this cluster (cost per kind: docs/registries.md#what-everything-costs)",
				"registry", name, "expanded", strings.Join(r.expanded, "; "))
		}
	}
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
		if !c.emptyAtStart {
			if err := c.removeOrphans(ctx, wanted); err != nil {
				return err
			}
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
			cluster: c.cfg.Cluster, w: w, raw: c.kube.CoreV1().RESTClient(), js: c.js, pub: c,
			log: c.log, ttl: c.cfg.TombstoneTTL, pageSize: c.cfg.PageSize, m: c.m,
			streamEmpty: c.emptyAtStart && !c.started[gvr],
		})
		c.started[gvr] = true
		rctx, cancel := context.WithCancel(ctx)
		r := &runningSync{rs: rs, cancel: cancel, done: make(chan struct{})}
		c.running[gvr] = r
		go func() {
			defer close(r.done)
			_ = rs.Run(rctx)
		}()
		c.log.Info("caching resource", "gvr", gvr.String(), "namespaces", strings.Join(w.namespaces, ","))
	}
	answered := map[string]int64{}
	for name, r := range results {
		if r.matched {
			answered[name] = r.generation
		}
	}
	if !maps.Equal(answered, c.answered) {
		// A registry changed: the record says so now, not at the next
		// heartbeat. Not on every reconcile: a wildcard's is every
		// discovery interval, and each record is a write to the hub.
		c.answered = answered
		c.syncChanged()
	}
	return nil
}

func (c *Collector) reconcileSoon() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
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
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(stream.ClusterControls(c.cfg.Cluster)))
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
