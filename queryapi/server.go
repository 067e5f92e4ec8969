package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/connlimit"
	"github.com/fleetview/fleetview/internal/memberrbac"
	"github.com/fleetview/fleetview/internal/query"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/authz"
	"github.com/fleetview/fleetview/queryapi/catalog"
	"github.com/fleetview/fleetview/queryapi/kubeapi"
	"github.com/fleetview/fleetview/queryapi/rest"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// Relay is the hub's side of the request channel (internal/relay.Client).
type Relay = kubeapi.Relay

// RelayLimits bound the forwarded requests in flight (kubeapi.RelayLimits).
type RelayLimits = kubeapi.RelayLimits

// Config configures the API server.
type Config struct {
	Reader Reader
	// Searcher answers Search; nil uses Reader when it implements Searcher.
	Searcher Searcher
	// History answers the change feed and revisions (issue #48); nil uses
	// Reader when it implements HistoryReader, else they are 501.
	History HistoryReader
	// HistoryReplay, when set (history on), is what a resumed watch
	// replays: every change since its version while the history's window
	// holds it, 410 after; HistoryRetention is that window's time bound,
	// for which resourceVersions are kept (watchhistory.go). Nil: the
	// compacted stream, within MaxResumeAge.
	HistoryReplay    HistoryReplayer
	HistoryRetention time.Duration
	Registries       *regstore.Store
	Inventory        jetstream.KeyValue
	JetStream        jetstream.JetStream
	// StateReplicas is the replica count of the query API's state bucket
	// (the token key), the hub's --stream-replicas: a token issued before
	// a NATS server died must still verify after.
	StateReplicas int
	// Hub is the watch fan-out, fed by the materializer's Observer; nil
	// disables Watch (UNIMPLEMENTED).
	Hub *watchhub.Hub
	// Applied reports the materializer's applied sequence per cluster.
	Applied func() map[string]uint64
	// Backends, when set, tells the backends this process cannot use
	// (readiness, /v1/clusters, registry conditions).
	Backends BackendHealth
	// TokenKey seals resourceVersions and continue tokens; empty loads (or
	// creates) the installation's key in the fv_query KV bucket, so every
	// replica and restart accepts the tokens of the others.
	TokenKey []byte
	// WatchBuffer is the events a watch may queue for a slow client before
	// it is cut (default 4096).
	WatchBuffer int
	// BookmarkInterval is the period of BOOKMARK events (default 10s).
	BookmarkInterval time.Duration
	// MaxResumeAge is the oldest resourceVersion a watch resumes from
	// (default DefaultMaxResumeAge; older is 410).
	MaxResumeAge time.Duration
	// VersionWait is how long a List waits for the cache to reach a
	// requested resourceVersion (default 3s, like Kubernetes).
	VersionWait time.Duration
	// ReadinessInterval is how often /readyz and gRPC health are
	// recomputed (default 1s).
	ReadinessInterval time.Duration
	// Limits bound what clients can make the server hold (list pages,
	// watches, request sizes, gRPC connections).
	Limits Limits
	// ServerOptions are added to the gRPC server (e.g. TLS).
	ServerOptions []grpc.ServerOption
	// UnaryInterceptors and StreamInterceptors (authentication,
	// authorization) apply to every call: on the gRPC port and from the
	// REST and Kubernetes handlers, which call the services in-process.
	UnaryInterceptors  []grpc.UnaryServerInterceptor
	StreamInterceptors []grpc.StreamServerInterceptor
	// Guard, when set, is the authorizer among the interceptors: the
	// Kubernetes API's discovery, which reads the process's catalog
	// rather than calling a service, filters it by the Guard's judgment of
	// the caller.
	Guard *authz.Guard
	// MemberRBAC, when set, is kept equal to the member clusters' RBAC
	// objects in the cache (authz/memberrbac.go) while the server runs: the
	// authorizers a Guard in a member-RBAC mode decides with.
	MemberRBAC *memberrbac.Members
	// MemberRBACReadyWait bounds how long one followed member whose RBAC
	// has not been applied yet keeps the hub not ready (0:
	// authz.DefaultMemberRBACReadyWait); past it the hub serves that member
	// without its RBAC and /readyz says so (authz/readyrbac.go).
	MemberRBACReadyWait time.Duration
	// Metrics, when set, measures every call (its interceptors go first,
	// so refused calls count too) and the watches.
	Metrics *Metrics
	// Relay, when set, turns on acting through fleetview (issue #30): the
	// Kubernetes API forwards under /clusters/{name}/ what the cache does
	// not serve to that cluster's collector (kubeapi.ActThrough), each
	// request admitted by the Guard and audited on ActAudit.
	Relay    Relay
	ActAudit *slog.Logger
	// ActRate and ActBurst bound each caller's forwarded requests (0: the
	// Kubernetes API's defaults, 20 a second, bursts of 40).
	ActRate  float64
	ActBurst int
	// ActConcurrency bounds the forwarded requests in flight per cluster
	// and per caller in a cluster, streams apart (zero: the defaults,
	// kubeapi.RelayLimits).
	ActConcurrency RelayLimits
	// ActProxy forwards the proxy subresources (nodes, pods and services
	// .../proxy); off, they are 501 like exec (kubeapi.ActThroughConfig).
	ActProxy bool
	// KubeLists says how many objects one list answer of the Kubernetes
	// API holds (the zero value: the budget policy with its default
	// budget, kubeapi.ListPolicy); the REST and gRPC lists keep their pages.
	KubeLists kubeapi.ListPolicy
	// Handlers are served on the HTTP port beside the API, by path pattern
	// (e.g. the web console at /console/). They get the same body limit but
	// no authentication of their own: whatever they read must come through
	// the API with the caller's credentials.
	Handlers map[string]http.Handler
	// GRPCListener and HTTPListener are owned by the server once Run starts.
	GRPCListener net.Listener
	HTTPListener net.Listener
	Logger       *slog.Logger
}

// DefaultMaxResumeAge is the oldest resourceVersion a watch resumes from
// by default: the tombstone TTL less a margin, since a delete older than
// the TTL may be gone from the stream a resumed watch replays.
const DefaultMaxResumeAge = stream.DefaultTombstoneTTL - 10*time.Minute

// Server serves gRPC and REST.
type Server struct {
	cfg     Config
	grpc    *grpc.Server
	http    *http.Server
	health  *health.Server
	qs      *queryService
	sync    *syncChecker
	ready   readiness
	catalog *catalog.Catalog
	// rbac follows the members' RBAC objects (nil: no member-RBAC mode).
	rbac *authz.RBACFollower
}

// New wires the services.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Metrics != nil {
		cfg.UnaryInterceptors = append([]grpc.UnaryServerInterceptor{cfg.Metrics.Unary}, cfg.UnaryInterceptors...)
		cfg.StreamInterceptors = append([]grpc.StreamServerInterceptor{cfg.Metrics.Stream}, cfg.StreamInterceptors...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := cfg.TokenKey
	if len(key) == 0 {
		var err error
		if key, err = loadTokenKey(ctx, cfg.JetStream, cfg.StateReplicas); err != nil {
			return nil, fmt.Errorf("queryapi: %w", err)
		}
	}
	sealer := query.NewSealer(key)
	sc := &syncChecker{js: cfg.JetStream, inv: cfg.Inventory, regs: cfg.Registries, applied: cfg.Applied, backends: cfg.Backends}
	qs := &queryService{reader: cfg.Reader, searcher: cfg.Searcher, history: cfg.History, replayer: cfg.HistoryReplay, backends: cfg.Backends, hub: cfg.Hub, js: cfg.JetStream, inv: cfg.Inventory,
		sealer: sealer, versions: newVersionBook(cfg.JetStream, sealer, versionAge(cfg), cfg.StateReplicas), maxResumeAge: cfg.MaxResumeAge, watchBuffer: cfg.WatchBuffer,
		bookmarkInterval: cfg.BookmarkInterval, versionWait: cfg.VersionWait, stopping: make(chan struct{}),
		limits: cfg.Limits, metrics: cfg.Metrics, log: cfg.Logger, watches: newWatchLimiter(cfg.Limits.MaxWatches, cfg.Limits.MaxWatchesPerClient)}
	cs, rs := &clusterService{kv: cfg.Inventory, js: cfg.JetStream, sync: sc}, &registryService{store: cfg.Registries, backends: cfg.Backends}
	gs, hs := newGRPCServer(cfg, qs, cs, rs)
	local := newInproc(cfg.UnaryInterceptors, cfg.StreamInterceptors)
	fleetviewv1.RegisterQueryServiceServer(local, qs)
	fleetviewv1.RegisterClusterServiceServer(local, cs)
	fleetviewv1.RegisterRegistryServiceServer(local, rs)
	gw, err := newGateway(ctx, local)
	if err != nil {
		return nil, err
	}
	catCfg := catalog.Config{Inventory: cfg.Inventory, Registries: cfg.Registries, Logger: cfg.Logger}
	if cfg.MemberRBAC != nil {
		// An identity map may select members by their labels.
		catCfg.OnLabels = cfg.MemberRBAC.SetLabels
	}
	cat, err := catalog.New(catCfg)
	if err != nil {
		return nil, fmt.Errorf("queryapi: %w", err)
	}
	sc.catalog = cat
	qs.catalog = cat
	var rbac *authz.RBACFollower
	if cfg.MemberRBAC != nil {
		watch := func(ctx context.Context, req *fleetviewv1.WatchRequest, send func(*fleetviewv1.WatchEvent) error) error {
			return qs.watch(internal(ctx), req, send)
		}
		rbac = authz.NewRBACFollower(watch, cfg.MemberRBAC, cfg.Logger, cfg.Metrics)
		sc.rbacLoaded = rbac.Loaded
		sc.rbac = authz.NewRBACReadiness(rbac, cacheCount(qs), sc.resourceApplied, cfg.MemberRBACReadyWait)
	}
	if cfg.Guard != nil {
		clusterScoped := func(gr schema.GroupResource) bool {
			snap := cat.Current()
			if snap == nil {
				return false
			}
			for _, r := range snap.Resources() {
				if r.GVR.GroupResource() == gr {
					return !r.Namespaced
				}
			}
			return false
		}
		served := func() []schema.GroupResource {
			snap := cat.Current()
			if snap == nil {
				return nil // not loaded: nothing is served yet
			}
			rs := snap.Resources()
			out := make([]schema.GroupResource, 0, len(rs))
			for _, r := range rs {
				if gr := r.GVR.GroupResource(); !slices.Contains(out, gr) {
					out = append(out, gr)
				}
			}
			return out
		}
		cfg.Guard.UseCatalog(served, clusterScoped)
	}
	s := &Server{cfg: cfg, grpc: gs, health: hs, sync: sc, qs: qs, catalog: cat, rbac: rbac}
	// Every HTTP request: its body bounded before anything decodes it, its
	// remote address the peer of the in-process calls it makes.
	// Every HTTP request: refused first if its connection is over a cap,
	// its write deadline renewed per write (a watch outlives the write
	// timeout, a stuck reader does not), its body bounded before anything
	// decodes it, its remote address the peer of the in-process calls it
	// makes.
	var h http.Handler = connlimit.Deadlines(cfg.Limits.HTTPWriteTimeout, withPeer(limitBody(cfg.Limits.MaxRequestBytes, s.routes(gw, local))))
	if lim := cfg.Limits.Connections; lim != nil {
		h = lim.Refuse(h, rest.WriteError)
	}
	// ReadTimeout covers headers and body; once the body is read the
	// server clears the read deadline itself, so it does not cut long
	// answers.
	s.http = &http.Server{Handler: h, ReadHeaderTimeout: cfg.Limits.HTTPReadHeaderTimeout, ReadTimeout: cfg.Limits.HTTPReadTimeout,
		WriteTimeout: cfg.Limits.HTTPWriteTimeout, IdleTimeout: cfg.Limits.HTTPIdleTimeout}
	return s, nil
}

func (cfg *Config) check() error {
	if cfg.Reader == nil || cfg.Registries == nil || cfg.Inventory == nil || cfg.JetStream == nil {
		return errors.New("queryapi: Reader, Registries, Inventory and JetStream are required")
	}
	if cfg.GRPCListener == nil || cfg.HTTPListener == nil {
		return errors.New("queryapi: both listeners are required")
	}
	if err := cfg.KubeLists.Validate(); err != nil {
		return fmt.Errorf("queryapi: %w", err)
	}
	return nil
}

func (cfg *Config) setDefaults() {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = 4096
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 10 * time.Second
	}
	if cfg.MaxResumeAge <= 0 {
		cfg.MaxResumeAge = DefaultMaxResumeAge
	}
	if cfg.VersionWait <= 0 {
		cfg.VersionWait = 3 * time.Second
	}
	if cfg.ReadinessInterval <= 0 {
		cfg.ReadinessInterval = time.Second
	}
	if cfg.Searcher == nil {
		cfg.Searcher, _ = cfg.Reader.(Searcher)
	}
	if cfg.History == nil {
		cfg.History, _ = cfg.Reader.(HistoryReader)
	}
	cfg.Limits.setDefaults()
}

// newGRPCServer registers the services; health stays NOT_SERVING until
// readiness is first computed.
func newGRPCServer(cfg Config, qs *queryService, cs *clusterService, rs *registryService) (*grpc.Server, *health.Server) {
	opts := append([]grpc.ServerOption{grpc.MaxSendMsgSize(256 << 20),
		grpc.ChainUnaryInterceptor(cfg.UnaryInterceptors...), grpc.ChainStreamInterceptor(cfg.StreamInterceptors...)}, cfg.Limits.grpcOptions()...)
	opts = append(opts, cfg.ServerOptions...)
	gs := grpc.NewServer(opts...)
	fleetviewv1.RegisterQueryServiceServer(gs, qs)
	fleetviewv1.RegisterClusterServiceServer(gs, cs)
	fleetviewv1.RegisterRegistryServiceServer(gs, rs)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(fleetviewv1.QueryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// newGateway serves the REST gateway from the services in-process, so
// REST calls pass the same interceptors as gRPC ones.
func newGateway(ctx context.Context, local *inproc) (*runtime.ServeMux, error) {
	gw := runtime.NewServeMux(runtime.WithErrorHandler(rest.GatewayErrorHandler))
	for _, reg := range []func() error{
		func() error {
			return fleetviewv1.RegisterQueryServiceHandlerClient(ctx, gw, fleetviewv1.NewQueryServiceClient(local))
		},
		func() error {
			return fleetviewv1.RegisterClusterServiceHandlerClient(ctx, gw, fleetviewv1.NewClusterServiceClient(local))
		},
		func() error {
			return fleetviewv1.RegisterRegistryServiceHandlerClient(ctx, gw, fleetviewv1.NewRegistryServiceClient(local))
		},
	} {
		if err := reg(); err != nil {
			return nil, fmt.Errorf("queryapi: gateway: %w", err)
		}
	}
	return gw, nil
}

// routes serves the gateway, plus lists and watches written straight to
// the client (the gateway's JSON conversion dominated large lists), and
// the probes.
func (s *Server) routes(gw *runtime.ServeMux, local *inproc) *http.ServeMux {
	mux := http.NewServeMux()
	q := fleetviewv1.NewQueryServiceClient(local)
	mux.Handle("/v1/", withSurface(SurfaceREST, gw))
	mux.Handle("/v1/resources/", withSurface(SurfaceREST, rest.NewList(q, gw)))
	mux.Handle("/v1/watch/", withSurface(SurfaceREST, rest.NewWatch(q)))
	mux.Handle("/v1/search", withSurface(SurfaceREST, rest.NewSearch(q, gw)))
	history := withSurface(SurfaceREST, rest.NewHistory(q, gw))
	mux.Handle("/v1/changes", history)
	mux.Handle("/v1/revisions/", history)
	var vis kubeapi.Visibility
	if s.cfg.Guard != nil {
		vis = s.cfg.Guard.CatalogVisibility
	}
	opts := []kubeapi.Option{kubeapi.WithListPolicy(s.cfg.KubeLists), kubeapi.OnSkipped(func(cluster string, _ error) {
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.malformed.WithLabelValues(cluster).Inc()
		}
	})}
	if s.cfg.Relay != nil {
		act := kubeapi.ActThroughConfig{Relay: s.cfg.Relay, Admit: authz.NoActCaller, Audit: s.cfg.ActAudit,
			PerCallerRate: s.cfg.ActRate, PerCallerBurst: s.cfg.ActBurst, Concurrency: s.cfg.ActConcurrency,
			Proxy: s.cfg.ActProxy}
		if s.cfg.Guard != nil {
			act.Admit, act.As = s.cfg.Guard.ActCaller, s.cfg.Guard.ActAs
		}
		if act.Audit == nil {
			act.Audit = s.cfg.Logger
		}
		if m := s.cfg.Metrics; m != nil {
			act.Observe = func(cluster, verb string, code int, took time.Duration) {
				m.actRequests.WithLabelValues(cluster, verb, strconv.Itoa(code)).Inc()
				m.actDuration.WithLabelValues(verb).Observe(took.Seconds())
			}
			act.ObserveCacheWait = func(waited time.Duration, caughtUp bool) {
				m.actCacheWait.WithLabelValues(strconv.FormatBool(caughtUp)).Observe(waited.Seconds())
			}
			act.ObserveInflight = func(cluster string, stream bool, delta int) {
				m.actInflight.WithLabelValues(cluster).Add(float64(delta))
				if stream {
					m.actStreams.WithLabelValues(cluster).Add(float64(delta))
				}
			}
			act.ObserveRefused = func(cluster, limit string) {
				m.actRefused.WithLabelValues(cluster, limit).Inc()
			}
		}
		opts = append(opts, kubeapi.ActThrough(act))
	}
	kube := withSurface(SurfaceKube, kubeapi.New(q, s.catalog, vis, s.cfg.Logger, opts...))
	for _, p := range kubeapi.Paths() {
		mux.Handle(p, kube)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", s.serveReadyz)
	mux.HandleFunc("/readyz/clusters", s.serveClustersReadyz)
	mux.HandleFunc("/openapi.json", rest.OpenAPI)
	for p, h := range s.cfg.Handlers {
		mux.Handle(p, h)
	}
	return mux
}

// serveReadyz computes readiness on request, so a probe right after a
// registry change never sees a stale answer.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	ok, why := s.sync.check(ctx)
	cancel()
	if !ok {
		rest.WriteError(w, fmt.Errorf("%w: %s", query.ErrNotReady, why))
		return
	}
	if s.sync.rbac != nil {
		if note := s.sync.rbac.Served(); note != "" {
			_, _ = w.Write([]byte("ok\n" + note + "\n"))
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}

// serveClustersReadyz reports every cluster's sync, 200 when all are
// synced and 503 otherwise, with the same JSON body either way.
func (s *Server) serveClustersReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	cr, err := s.sync.clusters(ctx)
	if err != nil {
		rest.WriteError(w, fmt.Errorf("%w: %v", query.ErrNotReady, err))
		return
	}
	b, err := json.Marshal(cr)
	if err != nil {
		rest.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !cr.Synced {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(append(b, '\n'))
}

// watchReadiness recomputes readiness until ctx ends.
func (s *Server) watchReadiness(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReadinessInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, why := s.sync.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if s.ready.set(ok, why) {
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				st = healthpb.HealthCheckResponse_SERVING
			}
			s.health.SetServingStatus("", st)
			s.health.SetServingStatus(fleetviewv1.QueryService_ServiceDesc.ServiceName, st)
			s.cfg.Logger.Info("readiness changed", "ready", ok, "reason", why)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Run serves until ctx ends, then stops accepting and drains in-flight calls.
func (s *Server) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.cfg.GRPCListener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.http.Serve(s.cfg.HTTPListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		return s.catalog.Run(gctx)
	})
	g.Go(func() error {
		s.watchReadiness(gctx)
		return nil
	})
	if s.rbac != nil {
		g.Go(func() error {
			s.rbac.Run(gctx)
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		s.health.Shutdown()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// Watches never end by themselves: end them first so the graceful
		// stops below do not wait for them.
		close(s.qs.stopping)
		_ = s.http.Shutdown(sctx)
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			s.grpc.Stop()
		}
		return nil
	})
	err := g.Wait()
	if c, ok := s.cfg.Reader.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	return err
}
