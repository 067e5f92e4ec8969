package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
)

func (c *Collector) heartbeat(ctx context.Context, kv jetstream.KeyValue) error {
	interval := c.cfg.HeartbeatInterval
	// The first record waits for the first reconcile (at most one
	// interval). Written before it, the record would list no resources
	// and replace the previous run's, and the Kubernetes API, which
	// serves the resources the inventory lists, would answer 404 for
	// every cached resource until the next heartbeat: after a restart
	// every informer would list again instead of resuming its watch.
	first := time.NewTimer(interval)
	select {
	case <-c.reconciled:
	case <-first.C:
	case <-ctx.Done():
		first.Stop()
		return ctx.Err()
	}
	first.Stop()
	// The next ones come every interval at a phase of this collector's
	// own, drawn once from the second half of the interval: collectors
	// started together (a fleet-wide rollout, the fleet simulator) would
	// otherwise write their records, and ask their apiservers, in bursts
	// the size of the fleet, all through one KV stream of the hub. No gap
	// exceeds the interval.
	phase := time.NewTimer(wait.Jitter(interval/2, 1))
	defer phase.Stop()
	tick := phase.C
	for {
		ready, msg := c.checkMember(ctx)
		// Watch events published since the last heartbeat: the record
		// written next starts the hub's cache afresh.
		c.releaseHubRouteCache()
		c.putRecord(ctx, kv, ready, msg)
		if err := c.untilHeartbeat(ctx, tick, kv, ready, msg); err != nil {
			return err
		}
		if tick == phase.C {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
	}
}

// untilHeartbeat waits for the next heartbeat, writing the record again
// whenever a resource's sync state changes: the hub serves a cluster's
// resources once its record reports them synced, so a sync should show
// now, not a heartbeat later. A short pause lets the resources that sync
// together share one write; the member's state is as the last heartbeat
// checked it.
func (c *Collector) untilHeartbeat(ctx context.Context, tick <-chan time.Time, kv jetstream.KeyValue, ready bool, msg string) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			return nil
		case <-c.recordKick:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(recordCoalesce):
		}
		c.putRecord(ctx, kv, ready, msg)
	}
}

// recordCoalesce is how long a sync change waits for others before the
// record is written.
const recordCoalesce = 200 * time.Millisecond

// checkMember asks the member apiserver for its version and served APIs
// (and refreshes the cluster info): ready, or why not.
func (c *Collector) checkMember(ctx context.Context) (bool, string) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, err := c.serverVersion(vctx)
	var served []string
	if err == nil {
		served, err = c.servedAPIs(vctx)
	}
	cancel()
	if err != nil {
		return false, "member apiserver unreachable: " + err.Error()
	}
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
	c.checkAuthorization(ctx)
	return true, ""
}

func (c *Collector) putRecord(ctx context.Context, kv jetstream.KeyValue, ready bool, msg string) {
	if err := inventory.Put(ctx, kv, c.record(ready, msg)); err != nil && ctx.Err() == nil {
		c.m.hubRefused(err)
		c.log.Warn("heartbeat not written", "err", err)
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
		Counters: c.m.snapshot(), HubRefusals: hub, Authorization: c.authorization,
	}
	if len(c.answered) > 0 {
		rec.Registries = maps.Clone(c.answered)
	}
	for _, r := range c.running {
		w := r.rs.w
		names := c.names[w.gvr]
		st := inventory.ResourceState{
			Group: w.gvr.Group, Version: w.gvr.Version, Resource: w.gvr.Resource, Kind: w.kind, Namespaced: w.namespaced,
			ShortNames: names.shortNames, Categories: names.categories,
			Namespaces: w.namespaces, Synced: r.rs.synced.Load(), ObjectCount: r.rs.ledger.size(),
			SecretData: w.keepsAnyData(), Columns: r.rs.columnsNow(),
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
