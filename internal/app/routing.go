package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// defaultBackend is the id of the Badger backend in routes.
const defaultBackend = ""

// backendReader is what the query API needs from each backend.
type backendReader interface {
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name, cluster string) (query.Object, error)
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
	Versions(ctx context.Context) (query.Version, error)
	Search(ctx context.Context, o query.SearchOptions) (query.Page, error)
}

// osRoute is one registry that sends its resources to an OpenSearch backend.
type osRoute struct {
	backend  string
	affinity registry.ClusterAffinity
	gvks     map[schema.GroupVersionKind]bool
}

// pairKey is one resource of one cluster: the unit that moves between
// backends when the routes change.
type pairKey struct {
	cluster string
	gvr     schema.GroupVersionResource
	kind    string
}

// routeTable is an immutable snapshot of which backend holds what.
type routeTable struct {
	routes   []osRoute
	clusters map[string]registry.ClusterInfo
	kinds    map[schema.GroupVersionResource]string // from the inventory
	// pins are the resources whose routes changed but that still live in
	// (and are read from) their previous backend until the mover copied
	// them into the new one: a route change never makes the query side
	// read a backend that lacks objects.
	pins map[pairKey]string
	// moving are the resources being copied into a backend: its
	// materializer applies their events too, alongside the backend they are
	// pinned to, until it has caught up with the stream and the pin goes.
	// The entry stays until the old backend stopped (see handover).
	moving map[pairKey]handover
}

// handover is a resource on its way to a backend. Both backends apply its
// events for a while; watchers hear each event from one of them, by
// sequence: the old backend reports up to seq, the new one after it.
type handover struct {
	to  string
	seq uint64
}

// routed is the backend the registries name for a resource kind in a
// cluster: the OpenSearch backend of the first registry (by name) that
// selects it with backendStore.openSearch, else Badger.
func (t *routeTable) routed(gvr schema.GroupVersionResource, kind, cluster string) string {
	info, ok := t.clusters[cluster]
	if !ok {
		info = registry.ClusterInfo{Name: cluster}
	}
	gvk := gvr.GroupVersion().WithKind(kind)
	for _, r := range t.routes {
		if r.gvks[gvk] && r.affinity.Matches(info) {
			return r.backend
		}
	}
	return defaultBackend
}

// backendFor is the backend that holds (and serves) a resource kind in a
// cluster now: its pin while it waits to move, else its route.
func (t *routeTable) backendFor(gvr schema.GroupVersionResource, kind, cluster string) string {
	if b, ok := t.pins[pairKey{cluster, gvr, kind}]; ok {
		return b
	}
	return t.routed(gvr, kind, cluster)
}

// accepts is whether backend applies the resource's events: it holds it,
// or the resource is being copied into it.
func (t *routeTable) accepts(backend string, gvr schema.GroupVersionResource, kind, cluster string) bool {
	if t.backendFor(gvr, kind, cluster) == backend {
		return true
	}
	h, ok := t.moving[pairKey{cluster, gvr, kind}]
	return ok && h.to == backend
}

// reports is whether backend tells watchers about an object event it
// applied: events of a resource in transit come from one backend only.
func (t *routeTable) reports(backend string, gvr schema.GroupVersionResource, kind, cluster string, seq uint64) bool {
	h, ok := t.moving[pairKey{cluster, gvr, kind}]
	if !ok {
		return true
	}
	return (backend == h.to) == (seq > h.seq)
}

// with is a copy of t with other pins and moving entries.
func (t *routeTable) with(pins map[pairKey]string, moving map[pairKey]handover) *routeTable {
	c := *t
	c.pins, c.moving = pins, moving
	return &c
}

// Router keeps the route table current (registries and the inventory are
// re-read periodically) and answers which backend holds a resource.
type Router struct {
	regs *regstore.Store
	inv  jetstream.KeyValue
	ids  func(*registry.OpenSearchConfig) string
	log  *slog.Logger
	// pin, when set, keeps a resource whose route changed in its previous
	// backend (see routeTable.pins) until the mover moved it; serve sets it.
	// Without it (rebuild, which fills a fresh store) routes apply at once.
	pin bool
	// streams lists the clusters that have a stream (with pin), which
	// the inventory may not know.
	streams func(ctx context.Context) ([]string, error)
	// state, when set, is where the table is saved for the next run (see
	// routestate.go); serve sets it.
	state  string
	saveMu sync.Mutex

	table atomic.Pointer[routeTable]
	kinds sync.Map // GroupVersionResource -> kind, learned from events
}

func newRouter(regs *regstore.Store, inv jetstream.KeyValue, ids func(*registry.OpenSearchConfig) string, log *slog.Logger) *Router {
	r := &Router{regs: regs, inv: inv, ids: ids, log: log}
	r.table.Store(&routeTable{clusters: map[string]registry.ClusterInfo{}, kinds: map[schema.GroupVersionResource]string{}})
	return r
}

// refresh rebuilds the table from the registries and the inventory.
func (r *Router) refresh(ctx context.Context) error {
	rs, err := r.regs.Specs(ctx) // specs only: routing needs no status
	if err != nil {
		return err
	}
	t := &routeTable{clusters: map[string]registry.ClusterInfo{}, kinds: map[schema.GroupVersionResource]string{}}
	for _, reg := range rs {
		if reg.Spec.BackendStore == nil || reg.Spec.BackendStore.OpenSearch == nil {
			continue
		}
		route := osRoute{backend: r.ids(reg.Spec.BackendStore.OpenSearch), affinity: reg.Spec.TargetCluster, gvks: map[schema.GroupVersionKind]bool{}}
		for _, s := range reg.Spec.ResourceSelectors {
			route.gvks[s.GroupVersionKind()] = true
		}
		t.routes = append(t.routes, route)
	}
	if r.inv != nil {
		cs, err := inventory.List(ctx, r.inv)
		if err != nil {
			return err
		}
		for _, c := range cs {
			t.clusters[c.Name] = c.Info()
			for _, res := range c.Resources {
				if res.Kind != "" {
					t.kinds[schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource}] = res.Kind
				}
			}
		}
	}
	if r.pin {
		var streams []string
		if r.streams != nil {
			if streams, err = r.streams(ctx); err != nil {
				return err
			}
		}
		r.pinChanged(r.table.Load(), t, streams)
	}
	r.table.Store(t)
	// A table not saved leaves the previous one, which still names where
	// each resource is held: only a move's switch (see moveInto) changes
	// that, and it does not happen unsaved.
	if err := r.save(t); err != nil {
		r.log.Warn("saving the backend routes failed; retrying", "err", err)
	}
	return nil
}

// pinChanged pins, in next, every resource of a known cluster whose
// backend differs between prev (pins included) and next's routes to the
// backend that holds it in prev. Resources nobody has seen yet have no
// objects anywhere: their route applies at once.
func (r *Router) pinChanged(prev, next *routeTable, streams []string) {
	clusters := map[string]bool{}
	for _, m := range []map[string]registry.ClusterInfo{prev.clusters, next.clusters} {
		for c := range m {
			clusters[c] = true
		}
	}
	for _, c := range streams {
		clusters[c] = true
	}
	kinds := map[schema.GroupVersionResource]string{}
	// prev's kinds too: a table saved by the previous run knows kinds that
	// neither the inventory nor an event has named yet in this one.
	for _, m := range []map[schema.GroupVersionResource]string{prev.kinds, next.kinds} {
		for gvr, k := range m {
			kinds[gvr] = k
		}
	}
	r.kinds.Range(func(k, v any) bool {
		kinds[k.(schema.GroupVersionResource)] = v.(string)
		return true
	})
	next.pins, next.moving = map[pairKey]string{}, prev.moving
	consider := func(p pairKey) {
		was := prev.backendFor(p.gvr, p.kind, p.cluster)
		if next.routed(p.gvr, p.kind, p.cluster) == was {
			return
		}
		next.pins[p] = was
	}
	for c := range clusters {
		for gvr, k := range kinds {
			consider(pairKey{c, gvr, k})
		}
	}
	for p := range prev.pins {
		if _, done := next.pins[p]; !done {
			consider(p)
		}
	}
}

// Filter selects the object events of one backend (materializer.Config.Filter).
func (r *Router) Filter(backend string) func(ev *fleetviewv1.ResourceEvent) bool {
	return func(ev *fleetviewv1.ResourceEvent) bool {
		g := ev.GetGvr()
		gvr := schema.GroupVersionResource{Group: g.GetGroup(), Version: g.GetVersion(), Resource: g.GetResource()}
		if ev.GetKind() != "" {
			if k, ok := r.kinds.Load(gvr); !ok || k.(string) != ev.GetKind() {
				r.kinds.Store(gvr, ev.GetKind())
			}
		}
		return r.table.Load().accepts(backend, gvr, r.kindOf(gvr, ev.GetKind()), ev.GetCluster())
	}
}

// Observer wraps a backend's materializer observer: of the object events
// of a resource moving between backends, it passes only those this
// backend reports (see handover).
func (r *Router) Observer(backend string, f func(feed.Batch)) func(feed.Batch) {
	return func(b feed.Batch) {
		t := r.table.Load()
		if len(t.moving) == 0 {
			f(b)
			return
		}
		out := make([]feed.Event, 0, len(b.Events))
		for _, e := range b.Events {
			ev := e.Event
			if !feed.IsObjectEvent(ev) || t.reports(backend, stream.GVR(ev.GetGvr()), r.kindOf(stream.GVR(ev.GetGvr()), ev.GetKind()), b.Cluster, e.Seq) {
				out = append(out, e)
			}
		}
		b.Events = out
		f(b)
	}
}

func (r *Router) kindOf(gvr schema.GroupVersionResource, hint string) string {
	if hint != "" {
		return hint
	}
	if k, ok := r.kinds.Load(gvr); ok {
		return k.(string)
	}
	return r.table.Load().kinds[gvr]
}

// backendOf is the backend holding gvr in cluster.
func (r *Router) backendOf(gvr schema.GroupVersionResource, cluster string) string {
	return r.table.Load().backendFor(gvr, r.kindOf(gvr, ""), cluster)
}

// RoutingReader answers the query API from the backend that holds each
// resource and cluster; a list spanning backends is merged in the common
// order (namespace, name, cluster).
type RoutingReader struct {
	router   *Router
	mu       sync.RWMutex
	backends map[string]backendReader // "" is Badger
	// clusters lists the known clusters, for lists over every cluster.
	clusters func(ctx context.Context) ([]string, error)
}

// add makes a backend available to reads.
func (rr *RoutingReader) add(id string, r backendReader) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.backends[id] = r
}

// backend is the reader of a backend id; a backend a registry names but
// that is not connected yet reads as Badger (which holds nothing of it).
func (rr *RoutingReader) backend(id string) backendReader {
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	if r, ok := rr.backends[id]; ok {
		return r
	}
	return rr.backends[defaultBackend]
}

func (rr *RoutingReader) backendIDs() []string {
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	ids := make([]string, 0, len(rr.backends))
	for id := range rr.backends {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// split assigns the requested clusters (nil: all known) to backends.
func (rr *RoutingReader) split(ctx context.Context, gvr schema.GroupVersionResource, clusters []string) (map[string][]string, error) {
	if len(rr.backendIDs()) == 1 {
		return map[string][]string{defaultBackend: clusters}, nil
	}
	all := clusters == nil
	if all {
		var err error
		if clusters, err = rr.clusters(ctx); err != nil {
			return nil, err
		}
	}
	out := map[string][]string{}
	known := map[string]bool{}
	for _, id := range rr.backendIDs() {
		known[id] = true
	}
	for _, c := range clusters {
		b := rr.router.backendOf(gvr, c)
		if !known[b] {
			b = defaultBackend
		}
		out[b] = append(out[b], c)
	}
	if len(out) == 1 && all {
		for b := range out {
			out[b] = nil // every cluster: let the backend include new ones too
		}
	}
	if len(out) == 0 {
		out[defaultBackend] = clusters
	}
	return out, nil
}

// Get implements queryapi.Reader.
func (rr *RoutingReader) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name, cluster string) (query.Object, error) {
	if cluster != "" {
		return rr.backend(rr.router.backendOf(gvr, cluster)).Get(ctx, gvr, namespace, name, cluster)
	}
	parts, err := rr.split(ctx, gvr, nil)
	if err != nil {
		return query.Object{}, err
	}
	if len(parts) == 1 {
		for b := range parts {
			return rr.backend(b).Get(ctx, gvr, namespace, name, "")
		}
	}
	var found []query.Object
	for b, cs := range parts {
		for _, c := range cs {
			o, err := rr.backend(b).Get(ctx, gvr, namespace, name, c)
			switch {
			case err == nil:
				found = append(found, o)
			case errors.Is(err, query.ErrNotFound):
			default:
				return query.Object{}, err
			}
		}
	}
	switch len(found) {
	case 0:
		return query.Object{}, fmt.Errorf("%w: %s %q in any cluster", query.ErrNotFound, gvr.GroupResource(), qualifiedName(namespace, name))
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, o := range found {
		names[i] = o.Cluster
	}
	sort.Strings(names)
	return query.Object{}, fmt.Errorf("%w: %s %q found in clusters [%s]", query.ErrConflict, gvr.GroupResource(), qualifiedName(namespace, name), strings.Join(names, ", "))
}

func qualifiedName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// Versions implements queryapi.Reader: per cluster, the lowest sequence
// any backend has applied (every backend consumes every stream).
func (rr *RoutingReader) Versions(ctx context.Context) (query.Version, error) {
	var out query.Version
	for _, id := range rr.backendIDs() {
		v, err := rr.backend(id).Versions(ctx)
		if err != nil {
			return nil, err
		}
		out = minVersion(out, v)
	}
	if out == nil {
		out = query.Version{}
	}
	return out, nil
}

func minVersion(a, b query.Version) query.Version {
	if a == nil {
		return b.Clone()
	}
	for c, s := range b {
		if cur, ok := a[c]; !ok || s < cur {
			a[c] = s
		}
	}
	return a
}

// mergeCursor is the continue state of a list merged over backends: per
// backend, the cursor of its current page and how many of that page's
// items were already returned.
type mergeCursor struct {
	Parts map[string]*partCursor `json:"p"`
}

type partCursor struct {
	Cursor string `json:"c,omitempty"`
	Skip   int    `json:"s,omitempty"`
	Done   bool   `json:"d,omitempty"`
}

// List implements queryapi.Reader.
func (rr *RoutingReader) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	parts, err := rr.split(ctx, o.GVR, o.Clusters)
	if err != nil {
		return query.Page{}, err
	}
	if len(parts) == 1 && !strings.HasPrefix(o.Continue, mergePrefix) {
		for b, cs := range parts {
			o.Clusters = cs
			return rr.backend(b).List(ctx, o)
		}
	}
	return rr.merge(ctx, parts, o.Continue, o.Limit, func(b string, cs []string, cursor string) (query.Page, error) {
		bo := o
		bo.Clusters, bo.Continue = cs, cursor
		return rr.backend(b).List(ctx, bo)
	})
}

// Search implements queryapi.Searcher, over every backend.
func (rr *RoutingReader) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	ids := rr.backendIDs()
	if len(ids) == 1 {
		return rr.backend(defaultBackend).Search(ctx, o)
	}
	parts := map[string][]string{}
	for _, b := range ids {
		parts[b] = o.Clusters
	}
	return rr.merge(ctx, parts, o.Continue, o.Limit, func(b string, cs []string, cursor string) (query.Page, error) {
		bo := o
		bo.Clusters, bo.Continue = cs, cursor
		p, err := rr.backend(b).Search(ctx, bo)
		if err != nil {
			return p, err
		}
		// A backend a resource just moved away from holds its objects until
		// the mover drops them: only the backend that serves a resource
		// answers for it, so no object shows up twice.
		kept := p.Items[:0]
		for _, it := range p.Items {
			if it.GVR.Empty() || rr.servedBy(it.GVR, it.Cluster) == b {
				kept = append(kept, it)
			}
		}
		p.Items = kept
		return p, nil
	})
}

// servedBy is the backend whose answers about gvr in cluster count: the
// one that holds it, or Badger for a backend not connected.
func (rr *RoutingReader) servedBy(gvr schema.GroupVersionResource, cluster string) string {
	b := rr.router.backendOf(gvr, cluster)
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	if _, ok := rr.backends[b]; !ok {
		return defaultBackend
	}
	return b
}

const mergePrefix = "merge:"

type itemKey struct{ ns, name, cluster string }

func keyOf(o query.Object) itemKey {
	var m struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(o.JSON, &m)
	return itemKey{m.Metadata.Namespace, m.Metadata.Name, o.Cluster}
}

func (k itemKey) less(o itemKey) bool {
	if k.ns != o.ns {
		return k.ns < o.ns
	}
	if k.name != o.name {
		return k.name < o.name
	}
	return k.cluster < o.cluster
}

// merge pages through several backends at once and returns the first
// limit items in the common order.
func (rr *RoutingReader) merge(ctx context.Context, parts map[string][]string, cont string, limit int64, page func(b string, cs []string, cursor string) (query.Page, error)) (query.Page, error) {
	var out query.Page
	mc := mergeCursor{Parts: map[string]*partCursor{}}
	if cont != "" {
		raw, ok := strings.CutPrefix(cont, mergePrefix)
		if !ok || json.Unmarshal([]byte(raw), &mc) != nil {
			return out, fmt.Errorf("%w: continue: not a merged-list cursor", query.ErrInvalid)
		}
	}
	type source struct {
		b     string
		items []query.Object
		keys  []itemKey
		page  query.Page
		taken int
	}
	var srcs []*source
	names := make([]string, 0, len(parts))
	for b := range parts {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		pc := mc.Parts[b]
		if pc == nil {
			pc = &partCursor{}
			mc.Parts[b] = pc
		}
		if pc.Done {
			continue
		}
		p, err := page(b, parts[b], pc.Cursor)
		if err != nil {
			return out, err
		}
		if out.Version == nil {
			out.Version = p.Version.Clone()
		} else {
			out.Version = minVersion(out.Version, p.Version)
		}
		// A page whose items were all returned already: go to the next.
		for pc.Skip >= len(p.Items) && p.Continue != "" {
			pc.Cursor, pc.Skip = p.Continue, 0
			if p, err = page(b, parts[b], pc.Cursor); err != nil {
				return out, err
			}
		}
		items := p.Items
		if pc.Skip <= len(items) {
			items = items[pc.Skip:]
		} else {
			items = nil
		}
		s := &source{b: b, items: items, page: p}
		for _, it := range items {
			s.keys = append(s.keys, keyOf(it))
		}
		srcs = append(srcs, s)
	}
	// Merge until the limit, or until a source runs out of its page while
	// it has more: its next page may hold smaller keys.
merge:
	for limit <= 0 || int64(len(out.Items)) < limit {
		var best *source
		for _, s := range srcs {
			if s.taken == len(s.items) {
				if s.page.Continue != "" {
					break merge
				}
				continue
			}
			if best == nil || s.keys[s.taken].less(best.keys[best.taken]) {
				best = s
			}
		}
		if best == nil {
			break
		}
		out.Items = append(out.Items, best.items[best.taken])
		best.taken++
	}
	more := false
	for _, s := range srcs {
		pc := mc.Parts[s.b]
		if s.taken == len(s.items) {
			pc.Cursor, pc.Skip, pc.Done = s.page.Continue, 0, s.page.Continue == ""
		} else {
			pc.Skip += s.taken
		}
		if !pc.Done {
			more = true
		}
	}
	if more {
		b, _ := json.Marshal(mc)
		out.Continue = mergePrefix + string(b)
	}
	if out.Version == nil {
		out.Version = query.Version{}
	}
	return out, nil
}
