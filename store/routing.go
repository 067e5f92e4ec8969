package store

import (
	"context"
	"log/slog"
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
	Get(ctx context.Context, o query.GetOptions) (query.Object, error)
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
	Versions(ctx context.Context) (query.Version, error)
	Search(ctx context.Context, o query.SearchOptions) (query.Page, error)
}

// osRoute is one registry that sends its resources to a named backend
// (OpenSearch).
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
	ids  func(*registry.ResourceRegistry) string // a registry's backend (backendIDs)
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
	// switches counts the moves whose reads switched backend (switchReads):
	// the only change of where a resource with objects is read from, since
	// a changed route is pinned until its move. A paged read that spans
	// one cannot go on (see mergeCursor.Switches).
	switches atomic.Uint64
}

func newRouter(regs *regstore.Store, inv jetstream.KeyValue, ids func(*registry.ResourceRegistry) string, log *slog.Logger) *Router {
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
		id := r.ids(reg)
		if id == defaultBackend {
			continue
		}
		route := osRoute{backend: id, affinity: reg.Spec.TargetCluster, gvks: map[schema.GroupVersionKind]bool{}}
		for _, s := range reg.Spec.ResourceSelectors {
			route.gvks[s.GroupVersionKind()] = true
		}
		t.routes = append(t.routes, route)
	}
	// The clusters and kinds only place a route, and pins only follow a
	// route that changed: with no route now, none in the table being
	// replaced and nothing pinned or moving, there is nothing to place,
	// and a hub holding everything in Badger (the default) reads neither
	// a record per cluster nor the stream listing every refresh (at 2,000
	// clusters, 2,000 NATS round trips every 2 s).
	old := r.table.Load()
	if len(t.routes) == 0 && len(old.routes) == 0 && len(old.pins) == 0 && len(old.moving) == 0 {
		t.moving = old.moving
	} else if err := r.place(ctx, old, t); err != nil {
		return err
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

// place fills t's clusters and kinds from the inventory and, with pin,
// pins what changed between old and t.
func (r *Router) place(ctx context.Context, old, t *routeTable) error {
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
			var err error
			if streams, err = r.streams(ctx); err != nil {
				return err
			}
		}
		r.pinChanged(old, t, streams)
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

// reporter wraps a backend's materializer observer so that watchers hear
// each committed event from exactly one backend; it is the only place that
// decides. Control events (sync markers, resource removals) reach every
// materializer, and Badger's alone reports them. An object event is
// reported by the backend that applied it, except for a resource moving
// between backends, which both apply for a while: the old backend reports
// up to the handover's sequence, the new one after it (see handover).
func (r *Router) reporter(backend string, f func(feed.Batch)) func(feed.Batch) {
	if f == nil {
		return nil // nobody listens: the materializer keeps no prior state
	}
	return func(b feed.Batch) {
		t := r.table.Load()
		if backend == defaultBackend && len(t.moving) == 0 {
			f(b)
			return
		}
		out := make([]feed.Event, 0, len(b.Events))
		for _, e := range b.Events {
			ev := e.Event
			if !stream.IsObjectEvent(ev) {
				if backend == defaultBackend {
					out = append(out, e)
				}
				continue
			}
			if len(t.moving) == 0 || t.reports(backend, stream.GVR(ev.GetGvr()), r.kindOf(stream.GVR(ev.GetGvr()), ev.GetKind()), b.Cluster, e.Seq) {
				out = append(out, e)
			}
		}
		b.Events = out
		f(b)
	}
}

// update replaces the table with f's copy of it. Only the mover changes
// pins and moving entries, one move at a time, so no two updates race.
func (r *Router) update(f func(*routeTable) *routeTable) {
	r.table.Store(f(r.table.Load()))
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

// DefaultFilter selects the events the default store's materializer
// applies under the registries' current routes to the named kinds (no
// pins: a rebuild fills a fresh store), or is nil when no registry routes
// anything elsewhere.
func DefaultFilter(ctx context.Context, regs *regstore.Store, inv jetstream.KeyValue, named []Kind, log *slog.Logger) (func(*fleetviewv1.ResourceEvent) bool, error) {
	r := newRouter(regs, inv, backendIDs(named), log)
	if err := r.refresh(ctx); err != nil {
		return nil, err
	}
	if len(r.table.Load().routes) == 0 {
		return nil, nil
	}
	return r.Filter(defaultBackend), nil
}
