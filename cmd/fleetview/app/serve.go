package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/fleetview/fleetview/internal/connlimit"
	"github.com/fleetview/fleetview/internal/lifecycle"
	"github.com/fleetview/fleetview/internal/relay"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/queryapi"
	"github.com/fleetview/fleetview/queryapi/console"
	"github.com/fleetview/fleetview/queryapi/kubeapi"
	"github.com/fleetview/fleetview/queryapi/watchhub"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/opensearch"
)

// ServeOptions run the materializers (Badger, and OpenSearch for the
// registries that ask for it) and the query API against a NATS server;
// `up` adds an embedded NATS server and in-process collectors.
type ServeOptions struct {
	StateDir string
	GRPCAddr string
	HTTPAddr string
	// NATSClientOptions say how serve connects to NATS. Its token file is
	// also what up requires from every client of its embedded server.
	NATSClientOptions
	// MetricsOptions, when MetricsAddr is set, serve the query API's,
	// materializers' (and up's collectors') metrics at /metrics, and Go
	// profiles; loopback only unless MetricsAllowRemote, since neither is
	// authenticated.
	MetricsOptions
	// BatchSize is the Badger materializer's batch (one transaction).
	BatchSize int
	// KeepPageCache leaves the Badger value log's written pages in the
	// page cache instead of dropping them once they are on disk.
	KeepPageCache bool
	// History bounds the history of changes the Badger store keeps.
	History HistoryOptions
	// Indexes are the store's optional indexes (relations, counts).
	Indexes IndexOptions
	// MaxResumeAge is the oldest resourceVersion a watch resumes from
	// (0: queryapi.DefaultMaxResumeAge); an older one is 410 Expired and
	// the client lists again.
	MaxResumeAge time.Duration
	OpenSearch   OpenSearchOptions
	Auth         AuthOptions
	// Limits bound what API clients can make serve hold.
	Limits LimitOptions
	// KubeLists say how many objects one Kubernetes API list answer holds.
	KubeLists ListPolicyOptions
	// Memory bounds the process's Go heap.
	Memory MemoryOptions
	// Replicas is the replica count of the buckets and streams serve
	// (and up) create.
	Replicas ReplicaOptions
	// ActThrough has the Kubernetes API forward what the cache does not
	// serve to the clusters' collectors, as the caller (issue #30; off by
	// default; each collector enables its own classes).
	ActThrough bool
	// ActThroughRate and ActThroughBurst bound each caller's forwarded
	// requests (0: the defaults, 20 a second, bursts of 40).
	ActThroughRate  float64
	ActThroughBurst int
	// ActThroughConcurrency bounds the forwarded requests in flight per
	// cluster and per caller in a cluster, streams (watches, followed
	// logs) apart, so no caller holds a cluster's channel (issue #43; 0:
	// the defaults, 32, 24, 8, 5).
	ActThroughConcurrency queryapi.RelayLimits
	// ActThroughProxy forwards the proxy subresources (nodes, pods and
	// services .../proxy) too: exec-equivalent, so off by default even
	// with --act-through, and each collector needs its own proxy class.
	ActThroughProxy bool
	// ActThroughIdleTimeout is how long a forwarded request may go
	// without a frame from its collector (keep-alives included) before it
	// ends as "stopped answering"; ActThroughAcceptTimeout how long a
	// collector has to take a request (0: the defaults, 15 s and 5 s).
	// The collector's keep-alives come at most a third of the idle
	// timeout apart (the request carries it).
	ActThroughIdleTimeout   time.Duration
	ActThroughAcceptTimeout time.Duration
}

// AddFlags registers the flags.
func (o *ServeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "fleetview-state", "directory for the Badger cache (and, for up, the embedded NATS store)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", "127.0.0.1:7070", "gRPC listen address")
	fs.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:8080", "REST (grpc-gateway) listen address")
	o.NATSClientOptions.AddFlags(fs)
	o.MetricsOptions.AddFlags(fs)
	fs.IntVar(&o.BatchSize, "batch-size", 1000, "events per Badger transaction")
	o.History.AddFlags(fs)
	o.Indexes.AddFlags(fs)
	fs.BoolVar(&o.KeepPageCache, "badger-keep-page-cache", false, "keep the objects Badger writes in the page cache (faster first reads of recent objects, page cache growing with all that is written) instead of dropping them once they are on disk")
	fs.DurationVar(&o.MaxResumeAge, "max-resume-age", queryapi.DefaultMaxResumeAge, "oldest resourceVersion a watch resumes from; an older one is 410 Expired and the client lists again (at most the default: deletes older than the tombstone TTL may be gone from the streams)")
	o.OpenSearch.AddFlags(fs)
	o.Auth.AddFlags(fs)
	o.Limits.AddFlags(fs)
	o.KubeLists.AddFlags(fs)
	o.Memory.AddFlags(fs)
	o.Replicas.AddFlags(fs)
	fs.BoolVar(&o.ActThrough, "act-through", false, "forward, under the Kubernetes API's /clusters/{name}/, writes, logs and reads of what no registry caches to that cluster's collector, which sends them to its member as the authenticated caller (the collector's --act-through says which; up's in-process collectors of --context forward every class, on their context's credentials, which need impersonate; the member's RBAC decides); needs --token-auth-file")
	fs.Float64Var(&o.ActThroughRate, "act-through-rate", 20, "forwarded requests a second each caller may send (with --act-through); beyond them 429")
	fs.IntVar(&o.ActThroughBurst, "act-through-burst", 40, "forwarded requests each caller may send at once above --act-through-rate")
	fs.BoolVar(&o.ActThroughProxy, "act-through-proxy", false, "with --act-through, forward the proxy subresources (nodes/, pods/ and services/{name}/proxy) too, where a collector's --act-through has the proxy class (up's in-process collectors then forward them); off, they are 501 like exec: a node's proxy reaches the kubelet's /run (a command in a container), a pod's or service's reaches in-cluster endpoints from the member's network")
	fs.DurationVar(&o.ActThroughIdleTimeout, "act-through-idle-timeout", relay.DefaultIdleTimeout, "time a forwarded request may go without a word from its collector (it sends keep-alives a third of this apart) before it fails as the collector stopped answering (a watch or followed log then ends)")
	fs.DurationVar(&o.ActThroughAcceptTimeout, "act-through-accept-timeout", relay.DefaultAcceptTimeout, "time a cluster's collector has to take a forwarded request before it fails as not taken (503)")
	c := &o.ActThroughConcurrency
	fs.IntVar(&c.ClusterRequests, "act-through-cluster-requests", kubeapi.DefaultClusterRequests, "forwarded requests in flight to one cluster, all callers together (with --act-through; a collector serves 32 at once); beyond them 429")
	fs.IntVar(&c.ClusterStreams, "act-through-cluster-streams", kubeapi.DefaultClusterStreams, "forwarded watches and followed logs held open to one cluster, all callers together; below --act-through-cluster-requests, so short requests always have room; beyond them 429")
	fs.IntVar(&c.CallerRequests, "act-through-caller-requests", kubeapi.DefaultCallerRequests, "forwarded requests in flight from one caller to one cluster; below --act-through-cluster-requests, so no caller holds a cluster's channel; beyond them 429")
	fs.IntVar(&c.CallerStreams, "act-through-caller-streams", kubeapi.DefaultCallerStreams, "forwarded watches and followed logs one caller holds open to one cluster; at most --act-through-caller-requests and --act-through-cluster-streams; beyond them 429")
}

// Validate reports every problem at once.
func (o *ServeOptions) Validate() []error { return o.validate(true) }

// validate checks the options; client is false for up, which runs its
// own NATS server and has no server address to check.
func (o *ServeOptions) validate(client bool) []error {
	var errs []error
	if client {
		errs = append(errs, o.NATSClientOptions.Validate()...)
	}
	if o.StateDir == "" {
		errs = append(errs, fmt.Errorf("%w: --state-dir is required", ErrInvalidOptions))
	}
	addrs := map[string]string{"--grpc-addr": o.GRPCAddr, "--http-addr": o.HTTPAddr}
	errs = append(errs, o.MetricsOptions.Validate()...)
	for name, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %q: %v", ErrInvalidOptions, name, a, err))
		}
	}
	if o.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: --batch-size %d must not be negative", ErrInvalidOptions, o.BatchSize))
	}
	if o.MaxResumeAge < 0 || o.MaxResumeAge > queryapi.DefaultMaxResumeAge {
		errs = append(errs, fmt.Errorf("%w: --max-resume-age %s must be between 0 and %s: deletes older than the tombstone TTL may be gone from the streams", ErrInvalidOptions, o.MaxResumeAge, queryapi.DefaultMaxResumeAge))
	}
	errs = append(errs, o.Auth.Validate(o.GRPCAddr, o.HTTPAddr)...)
	errs = append(errs, o.Limits.Validate()...)
	errs = append(errs, o.KubeLists.Validate()...)
	errs = append(errs, o.Memory.Validate()...)
	errs = append(errs, o.Replicas.Validate()...)
	errs = append(errs, o.History.Validate()...)
	if o.ActThroughRate < 0 || o.ActThroughBurst < 0 {
		errs = append(errs, fmt.Errorf("%w: --act-through-rate %g and --act-through-burst %d must not be negative", ErrInvalidOptions, o.ActThroughRate, o.ActThroughBurst))
	}
	errs = append(errs, validateActConcurrency(o.ActThroughConcurrency)...)
	if t := o.ActThroughIdleTimeout; t < 0 || (t > 0 && t < time.Second) {
		errs = append(errs, fmt.Errorf("%w: --act-through-idle-timeout %s must be at least 1s (0: the default, %s)", ErrInvalidOptions, t, relay.DefaultIdleTimeout))
	}
	if o.ActThroughAcceptTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: --act-through-accept-timeout %s must not be negative (0: the default, %s)", ErrInvalidOptions, o.ActThroughAcceptTimeout, relay.DefaultAcceptTimeout))
	}
	if o.ActThroughProxy && !o.ActThrough {
		errs = append(errs, fmt.Errorf("%w: --act-through-proxy needs --act-through", ErrInvalidOptions))
	}
	if o.ActThrough && !o.Auth.enabled() {
		errs = append(errs, fmt.Errorf("%w: --act-through needs authentication (--token-auth-file or --client-ca-file): a forwarded request runs as its caller", ErrInvalidOptions))
	}
	return append(errs, o.OpenSearch.Validate()...)
}

// ServeConfig is ServeOptions validated, with their files read: where
// validation ends and wiring starts.
type ServeConfig struct {
	ServeOptions
	natsAuth   []nats.Option
	security   *security
	openSearch opensearch.Config
}

// Config validates the options (every error at once) and reads the files
// they name.
func (o ServeOptions) Config() (ServeConfig, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return ServeConfig{}, errors.Join(errs...)
	}
	return o.config()
}

// config reads the files of validated options.
func (o ServeOptions) config() (ServeConfig, error) {
	c := ServeConfig{ServeOptions: o}
	var err error
	if c.natsAuth, err = o.NATSClientOptions.natsOptions(); err != nil {
		return c, err
	}
	if c.security, err = o.Auth.build(); err != nil {
		return c, err
	}
	c.openSearch, err = o.OpenSearch.config()
	o.Limits.pits(&c.openSearch.Store)
	return c, err
}

// serve is the materializers, their stores, the metrics server and the
// query API on one NATS connection: serve's components, and up's after its
// NATS server. Each group's Build fills in what the next one uses.
type serve struct {
	o   ServeConfig
	log *slog.Logger
	// nc is the NATS connection, set by the group before serve's.
	nc    *nats.Conn
	bk    store.Buckets
	hub   *watchhub.Hub
	set   *store.Set
	conns *connlimit.Limiter
	// qm and registry hold the process's metrics; nil when metrics are off.
	qm       *queryapi.Metrics
	registry *prometheus.Registry
}

func newServe(o ServeConfig, log *slog.Logger) *serve { return &serve{o: o, log: log} }

// groups are serve's components in start order: the materializers and
// their stores, the metrics server (which reads the materializers), the
// query API (which reads the stores).
func (sv *serve) groups() []lifecycle.Group {
	return []lifecycle.Group{
		{Name: groupStore, Build: sv.openStore},
		{Name: groupMetrics, Build: sv.startMetrics},
		{Name: groupAPI, Build: sv.listenAPI},
	}
}

// openStore creates the buckets and streams serve needs and opens the
// stores; the set runs the materializers, and drains them and closes the
// stores when it stops.
func (sv *serve) openStore(ctx context.Context) ([]lifecycle.Runnable, error) {
	o, log, nc := sv.o, sv.log, sv.nc
	o.Memory.apply(log)
	// Everything serve creates, in one retry: with a NATS cluster that
	// is still settling each creation can time out once.
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	r := o.Replicas.replicas()
	err = retryJetStream(ctx, log, "buckets", func(ctx context.Context) error {
		// At once (store.OpenBuckets says why).
		var g errgroup.Group
		g.Go(func() (err error) { sv.bk, err = store.OpenBuckets(ctx, nc, r); return err })
		g.Go(func() error { return queryapi.EnsureState(ctx, js, r) })
		g.Go(func() error { return materializer.EnsureDeadLetterStream(ctx, js, r) })
		return g.Wait()
	})
	if err != nil {
		return nil, err
	}
	sv.hub = watchhub.New(watchhub.Options{})
	sv.set, err = store.New(ctx, store.Config{
		NATS: nc, Buckets: sv.bk,
		StateDir: o.StateDir, Default: o.defaultStore(), Named: namedStores(o.openSearch),
		Observer: sv.hub.Observe, StreamDepth: o.History.streamDepth(), Logger: log,
		Retry: func(ctx context.Context, what string, f func(context.Context) error) error {
			return retryJetStream(ctx, log, what, f)
		},
	})
	if err != nil {
		return nil, err
	}
	return []lifecycle.Runnable{sv.set}, nil
}

// startMetrics registers the query API's and the materializers' metrics on
// a new registry and serves it, when metrics are on.
func (sv *serve) startMetrics(context.Context) ([]lifecycle.Runnable, error) {
	sv.o.Limits.warnFileLimit(sv.log)
	sv.conns = sv.o.Limits.connections()
	if sv.o.MetricsAddr == "" {
		return nil, nil
	}
	reg := newMetricsRegistry()
	qm, err := queryapi.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if err := registerConnectionMetrics(reg, sv.conns); err != nil {
		return nil, err
	}
	mc, err := materializer.NewMetricsCollector(materializer.MetricsConfig{JetStream: sv.bk.JetStream, Materializers: sv.set.Materializers})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(mc); err != nil {
		return nil, err
	}
	srv, err := sv.o.startMetrics(reg, sv.o.Limits.debugServer())
	if err != nil {
		return nil, err
	}
	sv.qm, sv.registry = qm, reg
	sv.log.Info("metrics listening", "url", "http://"+srv.Addr()+"/metrics")
	return []lifecycle.Runnable{lifecycle.Closer(srv.Close)}, nil
}

// listenAPI listens on the API's addresses; the API serves until its
// group stops, then drains its calls and closes its reader.
func (sv *serve) listenAPI(context.Context) ([]lifecycle.Runnable, error) {
	o, set := sv.o, sv.set
	cfg := queryapi.Config{
		Reader: set.Reader(), Hub: sv.hub, Registries: sv.bk.Registries, Inventory: sv.bk.Inventory, JetStream: sv.bk.JetStream, StateReplicas: sv.bk.Replicas, Applied: set.Applied, Backends: set, Logger: sv.log,
		MaxResumeAge: o.MaxResumeAge, Limits: o.Limits.queryLimits(sv.conns), KubeLists: o.KubeLists.policy(), Metrics: sv.qm, Relay: o.relay(sv.nc),
		ActRate: o.ActThroughRate, ActBurst: o.ActThroughBurst, ActConcurrency: o.ActThroughConcurrency, ActProxy: o.ActThroughProxy,
		// The console is static: it reads through the API with the
		// user's token, like any other client.
		Handlers: map[string]http.Handler{console.Prefix: console.Handler()},
	}
	if h, ok := set.Reader().History(); ok && o.History.on() {
		// The history's reads, and a resumed watch replays it (issue #48).
		cfg.History, cfg.HistoryReplay, cfg.HistoryRetention = h, h, o.History.Retention
	}
	api, err := o.listenAPI(cfg)
	if err != nil {
		return nil, err
	}
	return []lifecycle.Runnable{api}, nil
}

// listenAPI builds the query API on the options' addresses and security.
func (o ServeConfig) listenAPI(cfg queryapi.Config) (*queryapi.Server, error) {
	sec := o.security
	gl, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", o.GRPCAddr, err)
	}
	hl, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		return nil, fmt.Errorf("listen %s: %w", o.HTTPAddr, err)
	}
	if sec.keyPair != nil {
		sec.keyPair.SetLogger(cfg.Logger.With("listener", "api"))
	}
	// Counted beneath TLS: a handshake that never finishes holds a
	// connection too, and the HTTP server handshakes only the *tls.Conn
	// it accepts itself.
	if lim := cfg.Limits.Connections; lim != nil {
		gl, hl = lim.Listen(gl), lim.Listen(hl)
	}
	if sec.httpTLS != nil {
		hl = tls.NewListener(hl, sec.httpTLS)
	} else if o.Auth.TokenFile != "" && (!isLoopback(o.GRPCAddr) || !isLoopback(o.HTTPAddr)) {
		cfg.Logger.Warn("query API serves bearer tokens and every cached object without TLS beyond loopback (set --tls-cert-file and --tls-private-key-file)")
	}
	cfg.ServerOptions, cfg.UnaryInterceptors, cfg.StreamInterceptors, cfg.Guard = sec.server, sec.unary, sec.stream, sec.guard
	cfg.ActAudit = sec.auditLog
	cfg.MemberRBAC = sec.members
	cfg.GRPCListener, cfg.HTTPListener = gl, hl
	api, err := queryapi.New(cfg)
	if err != nil {
		_ = gl.Close()
		_ = hl.Close()
		return nil, err
	}
	scheme := "http://"
	if sec.httpTLS != nil {
		scheme = "https://"
	}
	cfg.Logger.Info("query API listening", "grpc", gl.Addr().String(), "http", scheme+hl.Addr().String(), "console", scheme+hl.Addr().String()+console.Prefix)
	return api, nil
}

// RunServe runs the materializers and the query API until ctx ends.
// Stop order: the API first, so no request in flight meets a closed store;
// then the materializers drain and the stores close; the metrics server;
// NATS last, which the materializers drain into.
func RunServe(ctx context.Context, o ServeOptions, log *slog.Logger) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	defer cfg.security.close()
	sv := newServe(cfg, log)
	connect := lifecycle.Group{Name: groupNATS,
		Build: func(context.Context) ([]lifecycle.Runnable, error) {
			// RetryOnFailedConnect: a serve started with its NATS cluster
			// (or while one of the listed servers is down) waits for it,
			// as the collector does, instead of exiting.
			nc, err := o.NATSClientOptions.connect("fleetview-serve", nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
			if err != nil {
				return nil, err
			}
			sv.nc = nc
			return []lifecycle.Runnable{closeNATS(nc)}, nil
		},
		Ready: func(ctx context.Context) error { return waitJetStream(ctx, sv.nc, log) },
	}
	return lifecycle.Lifecycle{
		Groups: append([]lifecycle.Group{connect}, sv.groups()...),
		Stop:   [][]string{{groupAPI}, {groupStore}, {groupMetrics}, {groupNATS}},
	}.Run(ctx)
}

// relay is the hub's side of the request channel when --act-through is on.
func (o ServeConfig) relay(nc *nats.Conn) queryapi.Relay {
	if !o.ActThrough {
		return nil
	}
	// The relay's own bound is the hub's: the limiter (kubeapi) refuses
	// first, naming the limit.
	return relay.NewClient(nc, relay.Limits{PerCluster: o.ActThroughConcurrency.WithDefaults().ClusterRequests,
		IdleTimeout: o.ActThroughIdleTimeout, AcceptTimeout: o.ActThroughAcceptTimeout})
}

// validateActConcurrency checks the relay's bounds (zero: the default)
// keep what they promise: room for short requests whatever the streams,
// and room for others whatever one caller holds.
func validateActConcurrency(c queryapi.RelayLimits) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"cluster-requests", c.ClusterRequests}, {"cluster-streams", c.ClusterStreams}, {"caller-requests", c.CallerRequests}, {"caller-streams", c.CallerStreams}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%w: --act-through-%s %d must not be negative", ErrInvalidOptions, f.name, f.v))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	d := c.WithDefaults()
	if d.ClusterStreams >= d.ClusterRequests {
		errs = append(errs, fmt.Errorf("%w: --act-through-cluster-streams %d must be below --act-through-cluster-requests %d: streams held for an hour would leave short requests no room", ErrInvalidOptions, d.ClusterStreams, d.ClusterRequests))
	}
	if d.CallerRequests >= d.ClusterRequests {
		errs = append(errs, fmt.Errorf("%w: --act-through-caller-requests %d must be below --act-through-cluster-requests %d: one caller could hold the whole cluster", ErrInvalidOptions, d.CallerRequests, d.ClusterRequests))
	}
	if d.CallerStreams > d.CallerRequests || d.CallerStreams > d.ClusterStreams {
		errs = append(errs, fmt.Errorf("%w: --act-through-caller-streams %d must be at most --act-through-caller-requests %d and --act-through-cluster-streams %d", ErrInvalidOptions, d.CallerStreams, d.CallerRequests, d.ClusterStreams))
	}
	return errs
}
