package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/badger"
	"github.com/fleetview/fleetview/materializer/opensearch"
	"github.com/fleetview/fleetview/queryapi"
)

// ServeOptions run the materializers (Badger, and OpenSearch for the
// registries that ask for it) and the query API against a NATS server;
// `up` adds an embedded NATS server and in-process collectors.
type ServeOptions struct {
	StateDir string
	GRPCAddr string
	HTTPAddr string
	NATSURL  string
	// NATSTokenFile holds the token of the NATS server (serve connects
	// with it; up requires it from every client of its embedded server).
	NATSTokenFile string
	// MetricsAddr, when set, serves the materializers' counters in the
	// Prometheus text format at /metrics.
	MetricsAddr string
	// BatchSize is the Badger materializer's batch (one transaction).
	BatchSize int
	// KeepPageCache leaves the Badger value log's written pages in the
	// page cache instead of dropping them once they are on disk.
	KeepPageCache bool
	OpenSearch    OpenSearchOptions
	Auth          AuthOptions
}

// AddFlags registers the flags.
func (o *ServeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "fleetview-state", "directory for the Badger cache (and, for up, the embedded NATS store)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", "127.0.0.1:7070", "gRPC listen address")
	fs.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:8080", "REST (grpc-gateway) listen address")
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&o.NATSTokenFile, "nats-token-file", "", "file holding the NATS token")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve materializer metrics (Prometheus text) at http://ADDR/metrics and Go profiles at /debug/pprof/; empty = off")
	fs.IntVar(&o.BatchSize, "batch-size", 1000, "events per Badger transaction")
	fs.BoolVar(&o.KeepPageCache, "badger-keep-page-cache", false, "keep the objects Badger writes in the page cache (faster first reads of recent objects, page cache growing with all that is written) instead of dropping them once they are on disk")
	o.OpenSearch.AddFlags(fs)
	o.Auth.AddFlags(fs)
}

// Validate reports every problem at once.
func (o *ServeOptions) Validate() []error {
	var errs []error
	if o.StateDir == "" {
		errs = append(errs, fmt.Errorf("%w: --state-dir is required", ErrInvalidOptions))
	}
	addrs := map[string]string{"--grpc-addr": o.GRPCAddr, "--http-addr": o.HTTPAddr}
	if o.MetricsAddr != "" {
		addrs["--metrics-addr"] = o.MetricsAddr
	}
	for name, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %q: %v", ErrInvalidOptions, name, a, err))
		}
	}
	if o.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: --batch-size %d must not be negative", ErrInvalidOptions, o.BatchSize))
	}
	errs = append(errs, o.Auth.Validate(o.GRPCAddr, o.HTTPAddr)...)
	return append(errs, o.OpenSearch.Validate()...)
}

// backend is the materializers + Badger + OpenSearch + query API stack.
type backend struct {
	o       ServeOptions
	nc      *nats.Conn
	regs    *regstore.Store
	hub     *queryapi.Hub
	log     *slog.Logger
	store   *badger.Store
	reader  *badger.Reader
	rr      *RoutingReader
	router  *Router
	metrics *http.Server
	api     *queryapi.Server

	js       jetstream.JetStream
	mu       sync.Mutex
	members  []*member                    // Badger first, then OpenSearch backends as added
	osStores map[string]*opensearch.Store // by backend id
	// fail ends run with a member's error (set by run).
	fail func(error)
}

func newBackend(ctx context.Context, o ServeOptions, nc *nats.Conn, log *slog.Logger) (*backend, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	regs, err := regstore.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	inv, err := inventory.Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	if err := switchToRebuilt(o.StateDir, log); err != nil {
		return nil, err
	}
	store, err := badger.Open(badger.Options{Dir: filepath.Join(o.StateDir, badgerDir), Logger: log, KeepPageCache: o.KeepPageCache})
	if err != nil {
		return nil, err
	}
	b := &backend{o: o, nc: nc, js: js, regs: regs, log: log, store: store, reader: store.Reader(badger.ReaderOptions{}), osStores: map[string]*opensearch.Store{}}
	fail := func(err error) (*backend, error) {
		_ = b.reader.Close()
		_ = store.Close()
		return nil, err
	}
	b.router = newRouter(regs, inv, OpenSearchID, log)
	if err := b.router.refresh(ctx); err != nil {
		return fail(fmt.Errorf("backend routes: %w", err))
	}
	// From now on a route change moves the resource's objects (see
	// reroute.go), and so does one made while serve was stopped or a move
	// it did not finish: the table saved by the last run says where each
	// resource is held (see routestate.go).
	b.router.pin = true
	b.router.streams = func(ctx context.Context) ([]string, error) { return clusterStreams(ctx, js) }
	b.router.state = filepath.Join(o.StateDir, badgerDir, routesFile)
	if err := b.router.restore(ctx); err != nil {
		return fail(fmt.Errorf("backend routes: %w", err))
	}
	b.hub = queryapi.NewHub(queryapi.HubOptions{})
	mat, err := materializer.New(materializer.Config{Name: "badger", NATS: nc, Sink: store, BatchSize: o.BatchSize,
		Filter: b.router.Filter(defaultBackend), Observer: b.router.Observer(defaultBackend, b.hub.Observe), Logger: log})
	if err != nil {
		return fail(err)
	}
	b.members = append(b.members, &member{id: defaultBackend, sink: store, read: b.reader, mat: mat})
	b.rr = &RoutingReader{router: b.router, backends: map[string]backendReader{defaultBackend: b.reader}, clusters: func(ctx context.Context) ([]string, error) {
		return clusterStreams(ctx, js)
	}}
	if err := b.addOpenSearch(ctx); err != nil {
		return fail(err)
	}
	if o.MetricsAddr != "" {
		ml, err := net.Listen("tcp", o.MetricsAddr)
		if err != nil {
			return fail(fmt.Errorf("listen %s: %w", o.MetricsAddr, err))
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_ = materializer.WritePrometheus(w, b.materializers()...)
		})
		b.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = b.metrics.Serve(ml) }()
		log.Info("metrics listening", "url", "http://"+ml.Addr().String()+"/metrics")
	}
	sec, err := o.Auth.build()
	if err != nil {
		return fail(err)
	}
	gl, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return fail(fmt.Errorf("listen %s: %w", o.GRPCAddr, err))
	}
	hl, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		return fail(fmt.Errorf("listen %s: %w", o.HTTPAddr, err))
	}
	if sec.httpTLS != nil {
		hl = tls.NewListener(hl, sec.httpTLS)
	}
	api, err := queryapi.New(queryapi.Config{
		Reader: b.rr, Hub: b.hub, Registries: regs, Inventory: inv, JetStream: js, Applied: b.applied,
		ServerOptions: sec.server, GatewayDialOptions: sec.gateway,
		GRPCListener: gl, HTTPListener: hl, Logger: log,
	})
	if err != nil {
		_ = gl.Close()
		_ = hl.Close()
		return fail(err)
	}
	b.api = api
	log.Info("query API listening", "grpc", gl.Addr().String(), "http", "http://"+hl.Addr().String())
	return b, nil
}

// objectsOnly passes only object events on: control events reach every
// materializer, and the Badger one already reports them.
func objectsOnly(f func(feed.Batch)) func(feed.Batch) {
	return func(b feed.Batch) {
		out := make([]feed.Event, 0, len(b.Events))
		for _, e := range b.Events {
			if feed.IsObjectEvent(e.Event) {
				out = append(out, e)
			}
		}
		b.Events = out
		f(b)
	}
}

// addOpenSearch connects to the OpenSearch backends registries name that
// are not running yet, and prepares a materializer for each (started by
// run). A new backend's materializer starts from an empty checkpoint, so it
// receives the whole history of the resources routed to it.
func (b *backend) addOpenSearch(ctx context.Context) error {
	b.mu.Lock()
	skip := map[string]bool{}
	for id := range b.osStores {
		skip[id] = true
	}
	b.mu.Unlock()
	obs, err := b.o.OpenSearch.open(ctx, b.regs, skip, b.log)
	if err != nil {
		return err
	}
	for _, ob := range obs {
		m, err := materializer.New(materializer.Config{Name: "opensearch-" + ob.id, NATS: b.nc, Sink: ob.store,
			BatchSize: b.o.OpenSearch.BatchSize, FlushInterval: b.o.OpenSearch.FlushInterval,
			Filter: b.router.Filter(ob.id), Observer: b.router.Observer(ob.id, objectsOnly(b.hub.Observe)), Logger: b.log.With("backend", "opensearch", "addresses", ob.addresses)})
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.osStores[ob.id] = ob.store
		b.members = append(b.members, &member{id: ob.id, sink: ob.store, read: ob.store, mat: m, versioned: true})
		b.mu.Unlock()
		b.rr.add(ob.id, ob.store)
		b.log.Info("OpenSearch backend added", "id", ob.id, "addresses", ob.addresses)
	}
	return nil
}

func (b *backend) materializers() []*materializer.Materializer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*materializer.Materializer, len(b.members))
	for i, m := range b.members {
		out[i] = m.mat
	}
	return out
}

// member is the backend with that id, or nil when it is not connected.
func (b *backend) member(id string) *member {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// applied is, per cluster, the lowest sequence every materializer applied.
func (b *backend) applied() map[string]uint64 {
	var out query.Version
	for _, m := range b.materializers() {
		out = minVersion(out, m.Applied())
	}
	return out
}

// clusterStreams lists the clusters that have a stream.
func clusterStreams(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var out []string
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(stream.SubjectRoot+".obj.>"))
	for n := range names.Name() {
		if c, ok := stream.ClusterFromStream(n); ok {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, names.Err()
}

// run drains the materializers and the API, then closes the stores.
func (b *backend) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	failed := make(chan error, 1)
	b.fail = func(err error) {
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
	// startNew starts the members not running: new backends, and any the
	// mover left paused.
	startNew := func() {
		b.mu.Lock()
		ms := append([]*member(nil), b.members...)
		b.mu.Unlock()
		for _, m := range ms {
			m.start(gctx, b.fail)
		}
	}
	startNew()
	g.Go(func() error {
		// Registries applied later may name new OpenSearch backends.
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				// Routes first: a backend's materializer never runs with
				// routes that do not know it yet. A changed route pins its
				// resources to their old backend; the mover then copies
				// them into the new one (a new backend's materializer is
				// first started by the mover) and drops the old copy.
				err := b.router.refresh(gctx)
				if err == nil {
					err = b.addOpenSearch(gctx)
				}
				if err != nil && gctx.Err() == nil {
					b.log.Warn("adding OpenSearch backends failed; retrying", "err", err)
				}
				if err := b.reroute(gctx); err != nil && gctx.Err() == nil {
					b.log.Warn("moving resources between backends failed; retrying", "err", err)
				}
				startNew()
			}
		}
	})
	g.Go(func() error { return b.api.Run(gctx) })
	err := g.Wait()
	b.mu.Lock()
	ms := append([]*member(nil), b.members...)
	b.mu.Unlock()
	for _, m := range ms {
		m.pause() // ctx ended: waits for each materializer to drain
	}
	for _, st := range b.osStores {
		_ = st.Close()
	}
	if b.metrics != nil {
		_ = b.metrics.Close()
	}
	if cerr := b.reader.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := b.store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// RunServe runs the materializer and query API until ctx ends.
func RunServe(ctx context.Context, o ServeOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	tokOpts, err := natsTokenOption(o.NATSTokenFile)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.NATSURL, append(tokOpts, nats.Name("fleetview-serve"), nats.MaxReconnects(-1))...)
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	b, err := newBackend(ctx, o, nc, log)
	if err != nil {
		return err
	}
	return b.run(ctx)
}

// UpOptions run everything in one process.
type UpOptions struct {
	ServeOptions
	Kubeconfig string
	Contexts   []string
	NATSHost   string
	NATSPort   int
	// NATSUsersFile gives each member cluster its own NATS credentials
	// ("<cluster>:<password>" lines), limited to its own stream and keys.
	NATSUsersFile string
}

// AddFlags registers the flags.
func (o *UpOptions) AddFlags(fs *pflag.FlagSet) {
	o.ServeOptions.AddFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig holding the member clusters' contexts")
	fs.StringSliceVar(&o.Contexts, "context", nil, "kubeconfig context of a member cluster (repeatable); the member cluster is named after it")
	fs.StringVar(&o.NATSHost, "nats-host", "127.0.0.1", "address the embedded NATS server listens on (remote collectors connect to it)")
	fs.IntVar(&o.NATSPort, "nats-port", 4222, "port of the embedded NATS server (-1 = any free port)")
	fs.StringVar(&o.NATSUsersFile, "nats-users-file", "", "per-cluster NATS credentials of remote collectors, one <cluster>:<password> line each: a cluster's credentials reach only its own stream and keys")
}

// Validate reports every problem at once.
func (o *UpOptions) Validate() []error {
	errs := o.ServeOptions.Validate()
	// No --context is the hub mode: collectors run in the member clusters
	// and connect to the embedded NATS server.
	errs = append(errs, o.validateNATSAuth()...)
	seen := map[string]bool{}
	for _, c := range o.Contexts {
		if err := stream.ValidateCluster(c); err != nil {
			errs = append(errs, fmt.Errorf("%w: --context %q cannot name a member cluster: %v", ErrInvalidOptions, c, err))
		}
		if seen[c] {
			errs = append(errs, fmt.Errorf("%w: --context %q given twice", ErrInvalidOptions, c))
		}
		seen[c] = true
	}
	return errs
}

// RunUp runs an embedded NATS server, the Badger backend, the query API and
// one collector per context, until ctx ends. Shutdown: collectors stop and
// flush, the materializer drains and Badger closes, then NATS stops.
func RunUp(ctx context.Context, o UpOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	collectors := make([]collector.Config, 0, len(o.Contexts))
	for _, c := range o.Contexts {
		rc, err := restConfig(o.Kubeconfig, c)
		if err != nil {
			return err
		}
		collectors = append(collectors, collector.Config{Cluster: c, REST: rc, Logger: log})
	}
	ns, nc, err := startEmbeddedNATS(ctx, o, log)
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	defer nc.Close()
	log.Info("embedded NATS running", "url", ns.ClientURL(), "collectors", len(collectors))
	o.NATSURL = ns.ClientURL()
	b, err := newBackend(ctx, o.ServeOptions, nc, log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	cctx, stopCollectors := context.WithCancel(gctx)
	defer stopCollectors()
	var cg errgroup.Group
	for _, cfg := range collectors {
		cfg.NATS = nc
		col, err := collector.New(cfg)
		if err != nil {
			stopCollectors()
			return err
		}
		cg.Go(func() error { return col.Run(cctx) })
	}
	g.Go(func() error {
		err := cg.Wait()
		if err != nil && gctx.Err() == nil {
			return err
		}
		return nil
	})
	g.Go(func() error { return b.run(gctx) })
	return g.Wait()
}
