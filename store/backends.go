package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/materializer"
)

// Observer receives each committed batch of a backend's materializer
// (materializer.Config.Observer): the watch hub.
type Observer func(feed.Batch)

// Config configures the backend set.
type Config struct {
	NATS *nats.Conn
	Buckets
	// StateDir holds the default store (BadgerDir), the saved routes and
	// the replica's name on the streams (ReplicaID).
	StateDir string
	// Default is the store every resource goes to that no registry routes
	// elsewhere (Badger); its Named is nil.
	Default Kind
	// Named are the kinds of store registries can route resources to
	// (OpenSearch): the first kind that finds a backend in a registry
	// holds its resources.
	Named []Kind
	// Observer hears every committed object event once, from the backend
	// that reports it, and the default store's control events.
	Observer Observer
	// StreamDepth is the messages per object the default store's
	// materializer makes every cluster stream keep (materializer.Config):
	// the hub's --history-stream-depth with history on, 1 without; 0
	// leaves the streams as they are.
	StreamDepth int
	Logger      *slog.Logger
	// Retry runs a step that reads JetStream until it succeeds (nil: once).
	// A hub restarted into a NATS cluster answers its first reads before
	// its replicas of the buckets have caught up; the composition root
	// knows how long that may take.
	Retry func(ctx context.Context, what string, f func(context.Context) error) error
}

// Buckets are what the backends read besides the streams, opened once for
// the backends and the query API alike.
type Buckets struct {
	JetStream  jetstream.JetStream
	Registries *regstore.Store
	// Inventory is the cluster inventory bucket (cluster facts for
	// registries' cluster affinity, resource kinds).
	Inventory jetstream.KeyValue
	// Replicas is the replica count of the buckets and of the streams the
	// backends create (the dead letters): the hub's --stream-replicas.
	Replicas int
}

// OpenBuckets opens (creating them if need be) the registry and inventory
// buckets on nc.
func OpenBuckets(ctx context.Context, nc *nats.Conn, replicas int) (Buckets, error) {
	b := Buckets{Replicas: replicas}
	var err error
	if b.JetStream, err = jetstream.New(nc); err != nil {
		return b, err
	}
	// At once: every hub of a new NATS cluster creates the same buckets,
	// and a creation that loses that race waits for its timeout; one
	// wait for all, not one per bucket.
	var g errgroup.Group
	g.Go(func() (err error) { b.Registries, err = regstore.Open(ctx, b.JetStream, replicas); return err })
	g.Go(func() (err error) { b.Inventory, err = inventory.Bucket(ctx, b.JetStream, replicas); return err })
	return b, g.Wait()
}

// Set is the backends: their materializers, the router and the merged
// reader. Run applies the streams; Reader answers the query API.
type Set struct {
	cfg Config
	log *slog.Logger
	// replica names this process's consumers (ReplicaID).
	replica string
	rr      *RoutingReader
	router  *Router

	mu      sync.Mutex
	members []*member // the default store first, then named backends as added
	// names are the named backends' names for people, by id, for every
	// backend a registry names, open or not.
	names map[string]string
	// problems are the backends that cannot be used now, by id (probe).
	problems map[string]query.BackendProblem
	// fail ends Run with a member's error (set by Run).
	fail func(error)
}

// New opens the default store (switching to a finished rebuild first),
// restores the routes the last run saved and connects the named backends
// the registries name. Run starts applying; a Set never run is
// released by Close.
func New(ctx context.Context, cfg Config) (_ *Set, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retry == nil {
		cfg.Retry = func(ctx context.Context, _ string, f func(context.Context) error) error { return f(ctx) }
	}
	if err := switchToRebuilt(cfg.StateDir, cfg.Logger); err != nil {
		return nil, err
	}
	replica, err := ReplicaID(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if cfg.Default.Open == nil || cfg.Default.Named != nil {
		return nil, ErrNoDefaultStore
	}
	def, err := cfg.Default.Open(ctx, Target{Dir: BadgerDir(cfg.StateDir)}, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Set{cfg: cfg, log: cfg.Logger, replica: replica, names: map[string]string{}, problems: map[string]query.BackendProblem{}}
	s.members = []*member{{id: defaultBackend, name: cfg.Default.Name, b: def, versioned: def.Capabilities().Versioned}}
	// s, not a named result: every failing return below sets that to nil
	// before this runs.
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if err := cfg.Retry(ctx, "backend routes", s.route); err != nil {
		return nil, fmt.Errorf("backend routes: %w", err)
	}
	k := cfg.Default
	mat, err := materializer.New(materializer.Config{Name: k.Name, Durable: Durable(k.Name, replica), NATS: cfg.NATS, Sink: def, BatchSize: k.BatchSize, FlushInterval: k.FlushInterval,
		Filter: s.router.Filter(defaultBackend), Observer: s.router.reporter(defaultBackend, cfg.Observer), Replicas: cfg.Replicas, StreamDepth: cfg.StreamDepth, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s.members[0].mat = mat
	s.rr = &RoutingReader{router: s.router, backends: map[string]backendReader{defaultBackend: def}, clusters: s.clusterStreams}
	// Retried as the routes are: the registries are read again, and a hub
	// restarted into a JetStream cluster that is still electing can find no
	// responders a moment after the routes' read succeeded
	// (TestNATSClusterKill9's restarted hub exited on exactly that).
	// addNamed skips the backends an earlier attempt added. (The step's
	// name predates other kinds: OpenSearch is the only one.)
	if err := cfg.Retry(ctx, "OpenSearch backends", s.addNamed); err != nil {
		return nil, fmt.Errorf("OpenSearch backends: %w", err)
	}
	return s, nil
}

// route builds the router from the registries and the inventory, and
// restores what the last run saved.
func (s *Set) route(ctx context.Context) error {
	s.router = newRouter(s.cfg.Registries, s.cfg.Inventory, backendIDs(s.cfg.Named), s.log)
	if err := s.router.refresh(ctx); err != nil {
		return err
	}
	// From now on a route change moves the resource's objects (see
	// mover.go), and so does one made while serve was stopped or a move
	// it did not finish: the table saved by the last run says where each
	// resource is held (see routestate.go).
	s.router.pin = true
	s.router.streams = s.clusterStreams
	s.router.state = filepath.Join(BadgerDir(s.cfg.StateDir), routesFile)
	return s.router.restore(ctx)
}

func (s *Set) clusterStreams(ctx context.Context) ([]string, error) {
	return ClusterStreams(ctx, s.cfg.JetStream)
}

// Reader answers the query API from the backend that holds each resource.
func (s *Set) Reader() *RoutingReader { return s.rr }

// addNamed connects to the backends registries name that are not running
// yet, and prepares a materializer for each (started by Run). A new
// backend's materializer starts from an empty checkpoint, so it receives
// the whole history of the resources routed to it.
func (s *Set) addNamed(ctx context.Context) error {
	skip := map[string]bool{}
	for _, m := range s.snapshot() {
		skip[m.id] = true
	}
	obs, err := s.openNamed(ctx, skip)
	if err != nil {
		return err
	}
	for _, ob := range obs {
		k, name := ob.kind, ob.kind.Name+"-"+ob.ID
		m, err := materializer.New(materializer.Config{Name: name, Durable: Durable(name, s.replica), NATS: s.cfg.NATS, Sink: ob.b,
			BatchSize: k.BatchSize, FlushInterval: k.FlushInterval,
			Filter: s.router.Filter(ob.ID), Observer: s.router.reporter(ob.ID, s.cfg.Observer), Replicas: s.cfg.Replicas, Logger: s.log.With("backend", k.Name, "addresses", ob.Addresses)})
		if err != nil {
			_ = ob.b.Close()
			return err
		}
		s.mu.Lock()
		s.members = append(s.members, &member{id: ob.ID, name: backendName(k.Name, ob.Addresses), b: ob.b, mat: m, versioned: ob.b.Capabilities().Versioned})
		s.mu.Unlock()
		s.rr.add(ob.ID, ob.b)
		s.log.Info("backend added", "kind", k.Name, "id", ob.ID, "addresses", ob.Addresses)
	}
	return nil
}

// opened is a named backend just opened.
type opened struct {
	Target
	kind Kind
	b    Backend
}

// openNamed opens every backend the registries name, except those in skip
// (already running).
func (s *Set) openNamed(ctx context.Context, skip map[string]bool) ([]opened, error) {
	rs, err := s.cfg.Registries.Specs(ctx) // specs only: backends need no status
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var todo []opened
	for _, r := range rs {
		t, k, ok := named(s.cfg.Named, r)
		if !ok || seen[t.ID] {
			continue
		}
		seen[t.ID] = true
		s.mu.Lock()
		s.names[t.ID] = backendName(k.Name, t.Addresses)
		s.mu.Unlock()
		if !skip[t.ID] {
			todo = append(todo, opened{Target: t, kind: k})
		}
	}
	var out []opened
	for _, o := range todo {
		b, err := o.kind.Open(ctx, o.Target, s.log.With("backend", o.kind.Name, "registry", o.Registry.Name))
		if err != nil {
			err = fmt.Errorf("registry %s: %w", o.Registry.Name, err)
			s.setProblem(o.ID, err)
			for _, ob := range out {
				_ = ob.b.Close()
			}
			return nil, err
		}
		o.b = b
		out = append(out, o)
	}
	return out, nil
}

// Materializers are the backends' materializers (for metrics).
func (s *Set) Materializers() []*materializer.Materializer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*materializer.Materializer, len(s.members))
	for i, m := range s.members {
		out[i] = m.mat
	}
	return out
}

// member is the backend with that id, or nil when it is not connected.
func (s *Set) member(id string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (s *Set) snapshot() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*member(nil), s.members...)
}

// Applied is, per cluster, the lowest sequence every materializer applied.
func (s *Set) Applied() map[string]uint64 {
	var out query.Version
	for _, m := range s.Materializers() {
		out = minVersion(out, m.Applied())
	}
	return out
}

// Run applies the streams into every backend, picks up new registries'
// routes and backends, and moves resources whose route changed, until ctx
// ends or a materializer fails. Then it drains the materializers and closes
// the stores.
func (s *Set) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	failed := make(chan error, 1)
	s.fail = func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	g.Go(func() error {
		select {
		case err := <-failed:
			return err
		case <-gctx.Done():
			return nil
		}
	})
	s.startAll(gctx)
	g.Go(func() error { return s.follow(gctx) })
	g.Go(func() error { return s.probe(gctx) })
	err := g.Wait()
	for _, m := range s.snapshot() {
		m.pause() // ctx ended: waits for each materializer to drain
	}
	return errors.Join(err, s.Close())
}

// startAll starts the members not running: new backends, and any the
// mover left paused.
func (s *Set) startAll(ctx context.Context) {
	for _, m := range s.snapshot() {
		m.start(ctx, s.fail)
	}
}

// follow re-reads the routes every two seconds: registries applied later
// may name new OpenSearch backends or route resources elsewhere.
func (s *Set) follow(ctx context.Context) error {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// Routes first: a backend's materializer never runs with routes
		// that do not know it yet. A changed route pins its resources to
		// their old backend; the mover then copies them into the new one
		// (a new backend's materializer is first started by the mover) and
		// drops the old copy.
		err := s.router.refresh(ctx)
		if err == nil {
			err = s.addNamed(ctx)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("adding OpenSearch backends failed; retrying", "err", err)
		}
		if err := s.reroute(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("moving resources between backends failed; retrying", "err", err)
		}
		s.startAll(ctx)
	}
}

// Close closes the stores, each once; Run does it when it returns.
func (s *Set) Close() error {
	s.mu.Lock()
	var open []*member
	for _, m := range s.members {
		if !m.closed {
			m.closed = true
			open = append(open, m)
		}
	}
	s.mu.Unlock()
	// The named backends first, the default store last; only the default
	// store's error is the caller's (a named backend's was reported by
	// its probe).
	var err error
	for i := len(open) - 1; i >= 0; i-- {
		if cerr := open[i].b.Close(); open[i].id == defaultBackend {
			err = cerr
		}
	}
	return err
}
