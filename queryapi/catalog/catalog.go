package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
)

// RegistrySource is the registries store as the catalog reads it.
type RegistrySource interface {
	Watch(ctx context.Context) (jetstream.KeyWatcher, error)
	Specs(ctx context.Context) ([]*registry.ResourceRegistry, error)
}

// Config configures a Catalog.
type Config struct {
	// Inventory is the cluster inventory bucket, followed with a watch.
	Inventory jetstream.KeyValue
	// Registries are followed with their own watch.
	Registries RegistrySource
	Logger     *slog.Logger
	// OnLabels, when set, is told a cluster's labels each time its valid
	// record's labels change, or the cluster loses its valid record
	// (present false), including the records read at start: for member
	// RBAC identity maps that select clusters by labels. Called from the
	// inventory watch, one call at a time.
	OnLabels func(cluster string, labels map[string]string, present bool)
}

// Validate reports a missing field.
func (c Config) Validate() error {
	if c.Inventory == nil || c.Registries == nil {
		return fmt.Errorf("%w: Inventory and Registries are required", ErrConfig)
	}
	return nil
}

// Catalog is the process's resource catalog. Reads take the current
// snapshot without locking; it is replaced after the watches see a change
// (at most once per publishEvery).
type Catalog struct {
	cfg  Config
	snap atomic.Pointer[Snapshot]

	// mu guards the inputs the watches maintain.
	mu       sync.Mutex
	records  map[string]*inventory.Cluster
	regs     []*registry.ResourceRegistry
	judged   map[string]*clusterClaims
	invReady bool
	regReady bool
	loaded   chan struct{}
	// The watches mark what changed and Run's publisher replaces the
	// snapshot, at once when it was idle and then at most once per
	// publishEvery: a snapshot costs O(clusters) (the resolution over
	// every cluster's claims, the records' copy), so publishing one per
	// inventory change cost a fleet O(clusters²) as its clusters synced
	// (the CPU in resolve; measured: docs/benchmarks/fleet.md#2000-clusters-2026-12-03).
	dirty       chan struct{}
	pendingFull bool // the claims or the registries changed
	pendingRecs bool // only records changed (heartbeats)
}

// publishEvery bounds how often the snapshot is replaced.
const publishEvery = 100 * time.Millisecond

// New returns a Catalog that is empty until Run has read both buckets.
func New(cfg Config) (*Catalog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Catalog{cfg: cfg, records: map[string]*inventory.Cluster{}, judged: map[string]*clusterClaims{}, loaded: make(chan struct{}), dirty: make(chan struct{}, 1)}
	c.snap.Store(&Snapshot{})
	return c, nil
}

// Snapshot is the catalog at one moment; it is never changed.
type Snapshot struct {
	snapshotData
	sorted []*Resource
	names  []string
	// Records are the inventory records as last read, by cluster.
	records map[string]*inventory.Cluster
}

type snapshotData struct {
	resources map[schema.GroupVersionResource]*Resource
	clusters  map[string]*Cluster
}

// Current is the latest snapshot.
func (c *Catalog) Current() *Snapshot { return c.snap.Load() }

// Loaded reports whether both buckets have been read once.
func (c *Catalog) Loaded() bool {
	select {
	case <-c.loaded:
		return true
	default:
		return false
	}
}

// WaitLoaded waits until Loaded or ctx ends.
func (c *Catalog) WaitLoaded(ctx context.Context) error {
	select {
	case <-c.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run follows the inventory and the registries until ctx ends, re-opening
// a watch that closes (NATS restarted).
func (c *Catalog) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.retry(ctx, "inventory", c.followInventory) }()
	go func() { defer wg.Done(); c.retry(ctx, "registries", c.followRegistries) }()
	go func() { defer wg.Done(); c.publisher(ctx) }()
	wg.Wait()
	return nil
}

// publisher replaces the snapshot when the watches marked a change.
func (c *Catalog) publisher(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.dirty:
		}
		c.mu.Lock()
		full, recs := c.pendingFull, c.pendingRecs
		c.pendingFull, c.pendingRecs = false, false
		switch {
		case full:
			c.publish()
		case recs:
			c.publishRecords()
		}
		c.mu.Unlock()
		t.Reset(publishEvery)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// mark records a change for the publisher; c.mu is held. full: the
// resolution must be computed again, else only the records are new.
func (c *Catalog) mark(full bool) {
	if full {
		c.pendingFull = true
	} else {
		c.pendingRecs = true
	}
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

func (c *Catalog) retry(ctx context.Context, what string, follow func(context.Context) error) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := follow(ctx)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Warn("catalog: watch ended; re-opening", "watch", what, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// follow hands fn every update of w (nil: the initial values are in)
// until ctx ends; a watch that closes is an error named what.
func follow(ctx context.Context, w jetstream.KeyWatcher, what string, fn func(jetstream.KeyValueEntry) error) error {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New(what + " watch closed")
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

func (c *Catalog) followInventory(ctx context.Context) error {
	w, err := c.cfg.Inventory.WatchAll(ctx)
	if err != nil {
		return err
	}
	return follow(ctx, w, "inventory", func(e jetstream.KeyValueEntry) error {
		if e == nil {
			c.mu.Lock()
			c.invReady = true
			c.mark(true)
			c.mu.Unlock()
			return nil
		}
		c.applyRecord(e)
		return nil
	})
}

// applyRecord takes one inventory change. A record that fails validation
// is dropped like a deleted one: its cluster is then not served, and no
// other cluster is affected.
func (c *Catalog) applyRecord(e jetstream.KeyValueEntry) {
	key := e.Key()
	var rec *inventory.Cluster
	if e.Operation() == jetstream.KeyValuePut {
		r, err := inventory.Decode(key, e.Value())
		if err != nil {
			c.cfg.Logger.Warn("catalog: inventory record refused", "cluster", key, "err", err)
		} else {
			rec = r
		}
	}
	c.mu.Lock()
	notify := func() {}
	if on := c.cfg.OnLabels; on != nil {
		old, had := c.records[key]
		switch {
		case rec == nil && had:
			notify = func() { on(key, nil, false) }
		case rec != nil && (!had || !maps.Equal(old.Labels, rec.Labels)):
			notify = func() { on(key, rec.Labels, true) }
		}
	}
	c.applyLocked(key, rec)
	c.mu.Unlock()
	notify() // not under c.mu: the callee takes its own locks
}

// applyLocked records a cluster's record (nil: it has none); c.mu is held.
func (c *Catalog) applyLocked(key string, rec *inventory.Cluster) {
	if rec == nil {
		delete(c.records, key)
		delete(c.judged, key)
		c.mark(true)
		return
	}
	c.records[key] = rec
	judged := claimsOf(rec, c.regs)
	if old, ok := c.judged[key]; ok && reflect.DeepEqual(old, judged) {
		// A heartbeat: the record changed, not what it claims. The
		// resolution stands; only the records are new.
		c.mark(false)
		return
	}
	c.judged[key] = judged
	c.mark(true)
}

// publishRecords replaces the snapshot's records and keeps its
// resolution; c.mu is held.
func (c *Catalog) publishRecords() {
	prev := c.snap.Load()
	if !c.invReady || !c.regReady || prev.resources == nil {
		c.publish()
		return
	}
	s := *prev
	s.records = make(map[string]*inventory.Cluster, len(c.records))
	for k, v := range c.records {
		s.records[k] = v
	}
	c.snap.Store(&s)
}

func (c *Catalog) followRegistries(ctx context.Context) error {
	w, err := c.cfg.Registries.Watch(ctx)
	if err != nil {
		return err
	}
	initial := true
	return follow(ctx, w, "registry", func(e jetstream.KeyValueEntry) error {
		if e == nil {
			initial = false
		}
		if initial {
			return nil // read once the initial values are in
		}
		// Registries change rarely: reading them whole again is what
		// validates them, as every other reader does.
		regs, err := c.cfg.Registries.Specs(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.regs, c.regReady = regs, true
		for name, rec := range c.records {
			c.judged[name] = claimsOf(rec, regs)
		}
		c.mark(true)
		c.mu.Unlock()
		return nil
	})
}

// publish replaces the snapshot; c.mu is held.
func (c *Catalog) publish() {
	if !c.invReady || !c.regReady {
		return
	}
	s := &Snapshot{snapshotData: resolve(c.judged), records: make(map[string]*inventory.Cluster, len(c.records))}
	for k, v := range c.records {
		s.records[k] = v
	}
	for _, r := range s.resources {
		s.sorted = append(s.sorted, r)
	}
	sort.Slice(s.sorted, func(i, j int) bool { return s.sorted[i].GVR.String() < s.sorted[j].GVR.String() })
	for name := range s.clusters {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	c.snap.Store(s)
	select {
	case <-c.loaded:
	default:
		close(c.loaded)
	}
}

// Resource is one served resource.
func (s *Snapshot) Resource(gvr schema.GroupVersionResource) (*Resource, bool) {
	r, ok := s.resources[gvr]
	return r, ok
}

// Resources are the served resources, sorted.
func (s *Snapshot) Resources() []*Resource { return s.sorted }

// Cluster is one cluster's entry.
func (s *Snapshot) Cluster(name string) (*Cluster, bool) {
	c, ok := s.clusters[name]
	return c, ok
}

// ClusterNames are the clusters with a valid record, sorted.
func (s *Snapshot) ClusterNames() []string { return s.names }

// Record is a cluster's inventory record as last read.
func (s *Snapshot) Record(name string) (*inventory.Cluster, bool) {
	r, ok := s.records[name]
	return r, ok
}

// Records are all records, sorted by cluster name.
func (s *Snapshot) Records() []*inventory.Cluster {
	out := make([]*inventory.Cluster, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, s.records[n])
	}
	return out
}

// Mark is why cluster's copy of gvr is not followed; "" when it is, or
// its record does not report the resource.
func (s *Snapshot) Mark(cluster string, gvr schema.GroupVersionResource) string {
	if c, ok := s.clusters[cluster]; ok {
		return c.Marks[gvr]
	}
	return ""
}

// Visible reports whether the caller may read a resource in a cluster.
type Visible func(cluster string, gr schema.GroupResource) bool

// View is what one caller sees: as in Kubernetes, where discovery lists
// every resource whatever RBAC says, a cluster is visible when the caller
// may read some resource it serves, and then all its served resources
// are; cluster "" is every visible cluster, else that one alone.
type View struct {
	Resources []*Resource
	Clusters  []*Cluster
}

// View filters the snapshot by the caller's visibility (nil: all).
func (s *Snapshot) View(visible Visible, cluster string) View {
	var v View
	in := map[schema.GroupVersionResource]bool{}
	names := s.names
	if cluster != "" {
		names = nil
		if _, ok := s.clusters[cluster]; ok {
			names = []string{cluster}
		}
	}
	for _, n := range names {
		c := s.clusters[n]
		if visible != nil && !anyVisible(c, visible) {
			continue
		}
		v.Clusters = append(v.Clusters, c)
		for _, gvr := range c.Followed {
			in[gvr] = true
		}
	}
	for _, r := range s.sorted {
		if in[r.GVR] {
			v.Resources = append(v.Resources, r)
		}
	}
	return v
}

func anyVisible(c *Cluster, visible Visible) bool {
	for _, gvr := range c.Followed {
		if visible(c.Name, gvr.GroupResource()) {
			return true
		}
	}
	return false
}

// Fixed is a loaded catalog of fixed records and registries, followed by
// no watch: for tests and benchmarks of its readers.
func Fixed(recs []*inventory.Cluster, regs []*registry.ResourceRegistry) *Catalog {
	c := &Catalog{records: map[string]*inventory.Cluster{}, judged: map[string]*clusterClaims{}, loaded: make(chan struct{}),
		regs: regs, invReady: true, regReady: true}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		c.records[r.Name] = r
		c.judged[r.Name] = claimsOf(r, regs)
	}
	c.publish()
	return c
}

// Lookup is the served resource gvr as View(visible, cluster) would hold
// it, without building the view: a per-cluster request judges one
// cluster, a fleet request the clusters serving gvr until one is visible.
// known is false for a cluster that is not in the caller's view.
func (s *Snapshot) Lookup(visible Visible, cluster string, gvr schema.GroupVersionResource) (r *Resource, known, ok bool) {
	r, served := s.resources[gvr]
	if cluster != "" {
		c, exists := s.clusters[cluster]
		if !exists || (visible != nil && !anyVisible(c, visible)) {
			return nil, false, false
		}
		if !served || !slices.Contains(c.Followed, gvr) {
			return nil, true, false
		}
		return r, true, true
	}
	if !served {
		return nil, true, false
	}
	if visible == nil {
		return r, true, true
	}
	for _, name := range r.Clusters {
		if anyVisible(s.clusters[name], visible) {
			return r, true, true
		}
	}
	return nil, true, false
}
