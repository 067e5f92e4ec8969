package queryapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/authz"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

// syncChecker decides whether a cluster's cache equals the cluster: every
// resource its registries select is served and synced by the collector,
// and the materializer has applied the stream through the resource's
// latest sync marker. The inventory alone is not enough (Karmada #5846):
// a collector can be synced while the backend is still behind.
type syncChecker struct {
	js      jetstream.JetStream
	inv     jetstream.KeyValue
	regs    *regstore.Store
	applied func() map[string]uint64
	// backends, when set, tells the backends that cannot be used.
	backends BackendHealth
	// catalog holds the records; the hub is not ready before it loaded.
	catalog *catalog.Catalog
	// rbacLoaded, in a member-RBAC mode, reports whether the members' RBAC
	// objects in the cache have been applied once; the hub is not ready
	// before (it would deny what the members allow).
	rbacLoaded func() bool
	// rbac, in a member-RBAC mode, says whether each followed member's
	// RBAC has arrived and been applied once (authz/readyrbac.go).
	rbac *authz.RBACReadiness
	// markers are the sync markers read, per record (markerCache).
	markers markerCache

	// mu guards the start targets: each cluster stream's last sequence
	// when the catalog first loaded, which the materializer must reach
	// once before the hub serves (a restarted hub must not answer from a
	// cache far behind its streams). Latched once reached.
	mu       sync.Mutex
	targets  map[string]uint64
	caughtUp bool
}

// registries are the registries' specs for clusterSynced, read from the
// bucket once per answer however many clusters it covers (it was once per
// cluster: 2,000 consumers on the registries stream for one probe of
// /readyz/clusters). Not the catalog's: it follows the bucket up to
// 100 ms behind, and right after a registry is applied the clusters must
// not be reported synced for the registries they held before.
func (s *syncChecker) registries(ctx context.Context) ([]*registry.ResourceRegistry, error) {
	if s.regs == nil {
		return nil, nil
	}
	return s.regs.Specs(ctx) // specs only: sync needs no status
}

// clusterSynced reports whether rec's cache is synced, and if not why;
// regs are the registries (registries), last each cluster stream's last
// sequence when known (streamEnds; nil: unknown). A cache applied through
// its stream's end has applied every sync marker in it: no marker is read.
func (s *syncChecker) clusterSynced(ctx context.Context, regs []*registry.ResourceRegistry, rec *inventory.Cluster, applied, last map[string]uint64) (bool, string, error) {
	have := map[schema.GroupKind]inventory.ResourceState{}
	for _, r := range rec.Resources {
		have[schema.GroupKind{Group: r.Group, Kind: r.Kind}] = r
	}
	for _, reg := range regs {
		for _, sel := range reg.SelectorsFor(rec.Info()) {
			if sel.IsWildcard() {
				// Its kinds are what the member serves: once the
				// collector says it reconciled this generation, the
				// record lists each, and each is checked below.
				if g := rec.Registries[reg.Name]; g < reg.Generation {
					return false, fmt.Sprintf("registry %s (generation %d) not yet expanded by the cluster's collector", reg.Name, reg.Generation), nil
				}
				continue
			}
			gvk := sel.GroupVersionKind()
			if _, ok := have[gvk.GroupKind()]; !ok {
				return false, fmt.Sprintf("%s not yet cached (registry %s)", gvk.GroupKind(), reg.Name), nil
			}
		}
	}
	for _, r := range rec.Resources {
		if r.Message != "" {
			continue // not served by the cluster: nothing to sync
		}
		gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
		if ok, why, err := s.resourceApplied(ctx, rec, r, gvr, applied, last); err != nil || !ok {
			return false, why, err
		}
	}
	return true, "", nil
}

// resourceApplied reports whether one resource of rec is synced by its
// collector and applied by the materializer through its latest sync
// marker, and if not why.
func (s *syncChecker) resourceApplied(ctx context.Context, rec *inventory.Cluster, r inventory.ResourceState, gvr schema.GroupVersionResource,
	applied, last map[string]uint64) (bool, string, error) {
	if !r.Synced {
		return false, fmt.Sprintf("%s not synced by the collector", gvr.GroupResource()), nil
	}
	if end, known := last[rec.Name]; known && applied[rec.Name] >= end {
		return true, "", nil
	}
	seq, ok := s.markers.get(rec, gvr)
	if !ok {
		st, err := s.js.Stream(ctx, stream.StreamName(rec.Name))
		if err != nil {
			return false, "", err
		}
		msg, err := st.GetLastMsgForSubject(ctx, stream.ControlSubject(rec.Name, gvr))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Sprintf("%s has no sync marker yet", gvr.GroupResource()), nil
		}
		if err != nil {
			return false, "", err
		}
		seq = msg.Sequence
		s.markers.put(rec, gvr, seq)
	}
	if applied[rec.Name] < seq {
		return false, fmt.Sprintf("%s: cache applied through %d, sync marker at %d", gvr.GroupResource(), applied[rec.Name], seq), nil
	}
	return true, "", nil
}

// streamEnds is every cluster stream's last sequence, from one stream
// listing; nil when the listing fails (each marker is then read).
func (s *syncChecker) streamEnds(ctx context.Context) map[string]uint64 {
	if s.js == nil {
		return nil
	}
	seqs := map[string]uint64{}
	l := s.js.ListStreams(ctx, jetstream.WithStreamListSubject(stream.AllObjects))
	for info := range l.Info() {
		if cl, ok := stream.ClusterFromStream(info.Config.Name); ok {
			seqs[cl] = info.State.LastSeq
		}
	}
	if l.Err() != nil {
		return nil
	}
	return seqs
}

// markerCache holds each cluster's sync marker sequences as read for one
// inventory record (the catalog keeps one pointer per record written):
// /readyz/clusters and the cluster list answer for every cluster, and a
// direct get per cluster and resource on every call (each loading a
// block of the cluster's stream) cost a 2,000-cluster hub gigabytes and
// its JetStream API while a prober polled. A collector writes its record
// after each sync marker and every heartbeat (10 s), so a marker is read
// again at the latest one heartbeat after it was written; until then the
// cluster is judged by the marker of its previous sync, which the cache
// had reached or not.
type markerCache struct {
	mu      sync.Mutex
	byClust map[string]markerEntry
}

type markerEntry struct {
	rec  *inventory.Cluster
	seqs map[schema.GroupVersionResource]uint64
}

func (m *markerCache) get(rec *inventory.Cluster, gvr schema.GroupVersionResource) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byClust[rec.Name]
	if !ok || e.rec != rec {
		return 0, false
	}
	seq, ok := e.seqs[gvr]
	return seq, ok
}

func (m *markerCache) put(rec *inventory.Cluster, gvr schema.GroupVersionResource, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byClust == nil {
		m.byClust = map[string]markerEntry{}
	}
	e, ok := m.byClust[rec.Name]
	if !ok || e.rec != rec {
		e = markerEntry{rec: rec, seqs: map[schema.GroupVersionResource]uint64{}}
		m.byClust[rec.Name] = e
	}
	e.seqs[gvr] = seq
}

// keep drops the clusters not in names (clusters gone from the catalog).
func (m *markerCache) keep(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := make(map[string]bool, len(names))
	for _, n := range names {
		in[n] = true
	}
	for n := range m.byClust {
		if !in[n] {
			delete(m.byClust, n)
		}
	}
}

// readiness is the cached answer of /readyz and gRPC health.
type readiness struct {
	mu     sync.Mutex
	ready  bool
	reason string
}

func (r *readiness) get() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

func (r *readiness) set(ok bool, reason string) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = ok != r.ready
	r.ready, r.reason = ok, reason
	return changed
}

// check computes the hub's readiness: its own ability to serve. Its
// backends usable, NATS answering, the catalog loaded (and in a member-RBAC
// mode the members' RBAC objects applied once), and the
// materializer caught up, once, with the streams as they were at start,
// and in a member-RBAC mode every followed member's RBAC applied once
// (membersRBAC, bounded). Otherwise no cluster's record takes part: one
// cluster's record can only make that cluster not synced (clusters),
// never the hub not ready.
func (s *syncChecker) check(ctx context.Context) (bool, string) {
	if why := backendsNotReady(s.backends); why != "" {
		return false, why
	}
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return false, "NATS unavailable: " + err.Error()
	}
	if s.catalog != nil && !s.catalog.Loaded() {
		return false, "resource catalog not loaded yet"
	}
	if s.rbacLoaded != nil && !s.rbacLoaded() {
		return false, "member clusters' RBAC not loaded yet"
	}
	if ok, why := s.caughtUpAtStart(ctx); !ok {
		return false, why
	}
	return s.membersRBAC(ctx)
}

// membersRBAC, in a member-RBAC mode, reports whether every followed
// member's RBAC has been applied once (authz.RBACReadiness).
func (s *syncChecker) membersRBAC(ctx context.Context) (bool, string) {
	if s.rbac == nil || s.catalog == nil {
		return true, ""
	}
	regs, err := s.registries(ctx)
	if err != nil {
		return false, "registries: " + err.Error()
	}
	var applied map[string]uint64
	if s.applied != nil {
		applied = s.applied()
	}
	return s.rbac.Check(ctx, s.catalog.Current().Records(), regs, applied, s.streamEnds(ctx))
}

// caughtUpAtStart reports whether the materializer has applied every
// cluster stream through its last sequence when first asked.
func (s *syncChecker) caughtUpAtStart(ctx context.Context) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caughtUp || s.applied == nil || s.catalog == nil {
		return true, ""
	}
	if s.targets == nil {
		targets := map[string]uint64{}
		for _, name := range s.catalog.Current().ClusterNames() {
			st, err := s.js.Stream(ctx, stream.StreamName(name))
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue // nothing published yet: nothing to apply
			}
			if err != nil {
				return false, fmt.Sprintf("cluster %s stream: %v", name, err)
			}
			targets[name] = st.CachedInfo().State.LastSeq
		}
		s.targets = targets
	}
	applied := s.applied()
	var behind []string
	for name, seq := range s.targets {
		if applied[name] >= seq {
			continue
		}
		if s.nothingLeftBefore(ctx, name, applied[name], seq) {
			// The messages between are gone (replaced, expired, purged):
			// nothing is left for the materializer to apply.
			delete(s.targets, name)
			continue
		}
		behind = append(behind, fmt.Sprintf("%s (applied %d of %d)", name, applied[name], seq))
	}
	if len(behind) > 0 {
		sort.Strings(behind)
		return false, "materializer catching up with the streams: " + strings.Join(behind, ", ")
	}
	s.caughtUp = true
	return true, ""
}

// nothingLeftBefore reports whether cluster's stream holds no message
// after applied up to target: the stream's last sequence counts messages
// deleted since, which the materializer never sees.
func (s *syncChecker) nothingLeftBefore(ctx context.Context, cluster string, applied, target uint64) bool {
	st, err := s.js.Stream(ctx, stream.StreamName(cluster))
	if err != nil {
		return false
	}
	m, err := st.GetMsg(ctx, applied+1, jetstream.WithGetMsgSubject(natsnames.FullWildcard))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	return err == nil && m.Sequence > target
}

// clusterReadiness is one cluster's entry of /readyz/clusters.
type clusterReadiness struct {
	Name   string `json:"name"`
	Synced bool   `json:"synced"`
	Reason string `json:"reason,omitempty"`
}

// clustersReadiness is the answer of /readyz/clusters.
type clustersReadiness struct {
	Synced   bool               `json:"synced"`
	Reason   string             `json:"reason,omitempty"`
	Clusters []clusterReadiness `json:"clusters"`
}

// clusters reports each cluster's sync: its cache synced and every
// resource it reports followed by the catalog. All are synced when at
// least one cluster is registered and every cluster whose collector
// reports ready is synced; a cluster whose collector is down does not
// hold the others back (its cached state is served, and it says why).
func (s *syncChecker) clusters(ctx context.Context) (clustersReadiness, error) {
	out := clustersReadiness{Synced: true, Clusters: []clusterReadiness{}}
	snap := s.catalog.Current()
	recs := snap.Records()
	if len(recs) == 0 {
		out.Synced, out.Reason = false, "no member cluster registered yet"
		return out, nil
	}
	var applied map[string]uint64
	if s.applied != nil {
		applied = s.applied()
	}
	regs, err := s.registries(ctx)
	if err != nil {
		return out, err
	}
	last := s.streamEnds(ctx)
	s.markers.keep(snap.ClusterNames())
	for _, rec := range recs {
		cr := clusterReadiness{Name: rec.Name}
		if !rec.Ready {
			cr.Reason = "collector not ready: " + rec.Message
			out.Clusters = append(out.Clusters, cr)
			continue
		}
		// A record the catalog does not believe says nothing of its sync.
		ok, why := false, marksOf(snap, rec.Name)
		if why == "" {
			var err error
			if ok, why, err = s.clusterSynced(ctx, regs, rec, applied, last); err != nil {
				return out, fmt.Errorf("cluster %s: %w", rec.Name, err)
			}
		}
		cr.Synced, cr.Reason = ok, why
		if !ok {
			out.Synced = false
		}
		out.Clusters = append(out.Clusters, cr)
	}
	if !out.Synced {
		out.Reason = "not every cluster is synced"
	}
	return out, nil
}

// marksOf says which of a cluster's resources the catalog does not follow.
func marksOf(snap *catalog.Snapshot, cluster string) string {
	c, ok := snap.Cluster(cluster)
	if !ok || len(c.Marks) == 0 {
		return ""
	}
	var parts []string
	for gvr, why := range c.Marks {
		parts = append(parts, gvr.GroupResource().String()+": "+why)
	}
	sort.Strings(parts)
	return "not followed: " + strings.Join(parts, "; ")
}

// cacheCount counts cluster's objects of an RBAC resource in the cache.
func cacheCount(q *queryService) func(ctx context.Context, cluster, resource string) (int, error) {
	return func(ctx context.Context, cluster, resource string) (int, error) {
		req := &fleetviewv1.ListRequest{Group: rbacv1.GroupName, Version: "v1", Resource: resource, Clusters: []string{cluster}, Limit: 500}
		n := 0
		for {
			resp, err := q.list(internal(ctx), req)
			if err != nil {
				return 0, err
			}
			n += len(resp.GetRawItems()) + len(resp.GetItems())
			if resp.GetContinue() == "" {
				return n, nil
			}
			req.Continue = resp.GetContinue()
		}
	}
}
