package app

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/connlimit"
	"github.com/fleetview/fleetview/internal/debugserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/queryapi"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

// Default limits of serve and up: generous for every client fleetview is
// for (kubectl, informers, controllers, scripts), small enough that no
// client holds the server's memory or connections by itself.
const (
	DefaultMaxListObjects            = 10000
	DefaultMaxWatches                = 10000
	DefaultMaxWatchesPerClient       = 250
	DefaultGRPCMaxConcurrentStreams  = 1000
	DefaultMaxListSnapshots          = 1024
	DefaultMaxListSnapshotsPerClient = 64
	DefaultMaxConnections            = 10000
	DefaultMaxConnectionsPerClient   = 500
	DefaultHTTPReadHeaderTimeout     = 10 * time.Second
	DefaultHTTPReadTimeout           = 30 * time.Second
	DefaultHTTPWriteTimeout          = time.Minute
	DefaultHTTPIdleTimeout           = 2 * time.Minute
	DefaultGRPCConnectionTimeout     = 10 * time.Second
	DefaultGRPCMaxConnectionIdle     = 5 * time.Minute
)

// LimitOptions bound what API clients can make serve hold (every client
// is bounded). A zero cap is no cap; the flags set the defaults.
type LimitOptions struct {
	MaxListObjects            int64
	MaxWatches                int
	MaxWatchesPerClient       int
	MaxRequestBytes           int64
	GRPCMaxConcurrentStreams  uint32
	GRPCKeepaliveMinTime      time.Duration
	GRPCKeepaliveTime         time.Duration
	GRPCKeepaliveTimeout      time.Duration
	MaxListSnapshots          int
	MaxListSnapshotsPerClient int
	// Connections and their timeouts: every listener of serve and up
	// (the API's HTTP and gRPC ports; the metrics endpoint has its own
	// small caps) is bounded, since each connection costs a file
	// descriptor of the one limit NATS and Badger use too.
	MaxConnections          int
	MaxConnectionsPerClient int
	HTTPReadHeaderTimeout   time.Duration
	HTTPReadTimeout         time.Duration
	HTTPWriteTimeout        time.Duration
	HTTPIdleTimeout         time.Duration
	GRPCConnectionTimeout   time.Duration
	GRPCMaxConnectionIdle   time.Duration
}

// AddFlags registers the flags.
func (o *LimitOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&o.MaxListObjects, "max-list-objects", DefaultMaxListObjects,
		"most objects in one list or search answer; a larger limit, or none (limit=0, a full list), is answered with this many and a continue token instead of an error, "+
			"so informers and kubectl (client-go's pager) still read any list whole, page by page; 0 = no cap (one answer may hold every object in memory)")
	fs.IntVar(&o.MaxWatches, "max-watches", DefaultMaxWatches, "most watches open at once on the server, over every protocol; one more is 429 TooManyRequests (0 = no cap)")
	fs.IntVar(&o.MaxWatchesPerClient, "max-watches-per-client", DefaultMaxWatchesPerClient,
		"most watches one client holds at once: an authenticated user, or a remote host when authentication is off (every client behind one proxy shares it); one more is 429 TooManyRequests (0 = no cap)")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", queryapi.DefaultMaxRequestBytes,
		"largest request: a REST body (e.g. a registry) is refused with 413 before it is decoded, a gRPC message with RESOURCE_EXHAUSTED")
	fs.Uint32Var(&o.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", DefaultGRPCMaxConcurrentStreams, "most concurrent calls on one gRPC connection; more wait for a free stream (0 = no cap)")
	fs.DurationVar(&o.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", queryapi.DefaultKeepaliveMinTime, "shortest keepalive ping interval a gRPC client may use; a client pinging more often is disconnected")
	fs.DurationVar(&o.GRPCKeepaliveTime, "grpc-keepalive-time", queryapi.DefaultKeepaliveTime, "silence after which the server pings a gRPC connection, so a vanished client's watches end and release its quota")
	fs.DurationVar(&o.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", queryapi.DefaultKeepaliveTimeout, "how long the server waits for a keepalive answer before closing the connection")
	fs.IntVar(&o.MaxListSnapshots, "max-list-snapshots", DefaultMaxListSnapshots,
		"most list snapshots kept for continue tokens, per backend (Badger read transactions; OpenSearch points in time, which should stay within its search.max_open_pit_context, 300 per node by default); "+
			"when all are taken, the client holding the most loses its oldest (its token is 410 Expired)")
	fs.IntVar(&o.MaxListSnapshotsPerClient, "max-list-snapshots-per-client", DefaultMaxListSnapshotsPerClient,
		"most list snapshots one client holds; its next paged list expires its own oldest token, never another client's (0 = only --max-list-snapshots)")
	fs.IntVar(&o.MaxConnections, "max-connections", DefaultMaxConnections,
		"most connections open at once on the API's HTTP and gRPC ports together; one more is answered 503 ServiceUnavailable (gRPC UNAVAILABLE) and closed (0 = no cap)")
	fs.IntVar(&o.MaxConnectionsPerClient, "max-connections-per-client", DefaultMaxConnectionsPerClient,
		"most connections one client IP holds at once on the API's ports (every client behind one proxy shares it); one more is answered 429 TooManyRequests (gRPC RESOURCE_EXHAUSTED) and closed (0 = no cap)")
	fs.DurationVar(&o.HTTPReadHeaderTimeout, "http-read-header-timeout", DefaultHTTPReadHeaderTimeout, "time an HTTP client has to send a request's headers, from the connection's start or the end of its previous request")
	fs.DurationVar(&o.HTTPReadTimeout, "http-read-timeout", DefaultHTTPReadTimeout,
		"time an HTTP client has to send a whole request, headers and body; a slower body is answered 408 and the connection closed (answers and watches are not bounded by it; 0 = no bound)")
	fs.DurationVar(&o.HTTPWriteTimeout, "http-write-timeout", DefaultHTTPWriteTimeout,
		"time each write of an HTTP answer may take, renewed per write: watches and long lists stream on, a client that stops reading is cut (0 = no bound)")
	fs.DurationVar(&o.HTTPIdleTimeout, "http-idle-timeout", DefaultHTTPIdleTimeout, "time a keep-alive HTTP connection may wait for its next request before it is closed (0 = --http-read-timeout)")
	fs.DurationVar(&o.GRPCConnectionTimeout, "grpc-connection-timeout", DefaultGRPCConnectionTimeout, "time a gRPC client has to finish the connection's TLS and HTTP/2 handshakes")
	fs.DurationVar(&o.GRPCMaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxConnectionIdle,
		"time a gRPC connection may go without calls before the server closes it (GOAWAY; clients reconnect on their next call; 0 = never)")
}

// Validate reports every problem at once.
func (o *LimitOptions) Validate() []error {
	var errs []error
	for flag, v := range map[string]int64{"--max-list-objects": o.MaxListObjects, "--max-watches": int64(o.MaxWatches),
		"--max-watches-per-client": int64(o.MaxWatchesPerClient), "--max-request-bytes": o.MaxRequestBytes,
		"--max-list-snapshots": int64(o.MaxListSnapshots), "--max-list-snapshots-per-client": int64(o.MaxListSnapshotsPerClient),
		"--grpc-keepalive-min-time": int64(o.GRPCKeepaliveMinTime), "--grpc-keepalive-time": int64(o.GRPCKeepaliveTime),
		"--grpc-keepalive-timeout": int64(o.GRPCKeepaliveTimeout),
		"--max-connections":        int64(o.MaxConnections), "--max-connections-per-client": int64(o.MaxConnectionsPerClient),
		"--http-read-header-timeout": int64(o.HTTPReadHeaderTimeout), "--http-read-timeout": int64(o.HTTPReadTimeout),
		"--http-write-timeout": int64(o.HTTPWriteTimeout), "--http-idle-timeout": int64(o.HTTPIdleTimeout),
		"--grpc-connection-timeout": int64(o.GRPCConnectionTimeout), "--grpc-max-connection-idle": int64(o.GRPCMaxConnectionIdle)} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%w: %s must not be negative", ErrInvalidOptions, flag))
		}
	}
	if o.MaxWatches > 0 && o.MaxWatchesPerClient > o.MaxWatches {
		errs = append(errs, fmt.Errorf("%w: --max-watches-per-client %d exceeds --max-watches %d", ErrInvalidOptions, o.MaxWatchesPerClient, o.MaxWatches))
	}
	if o.MaxListSnapshots > 0 && o.MaxListSnapshotsPerClient > o.MaxListSnapshots {
		errs = append(errs, fmt.Errorf("%w: --max-list-snapshots-per-client %d exceeds --max-list-snapshots %d", ErrInvalidOptions, o.MaxListSnapshotsPerClient, o.MaxListSnapshots))
	}
	if o.MaxConnections > 0 && o.MaxConnectionsPerClient > o.MaxConnections {
		errs = append(errs, fmt.Errorf("%w: --max-connections-per-client %d exceeds --max-connections %d", ErrInvalidOptions, o.MaxConnectionsPerClient, o.MaxConnections))
	}
	if o.HTTPReadTimeout > 0 && o.HTTPReadHeaderTimeout > o.HTTPReadTimeout {
		errs = append(errs, fmt.Errorf("%w: --http-read-header-timeout %s exceeds --http-read-timeout %s, which covers the headers too", ErrInvalidOptions, o.HTTPReadHeaderTimeout, o.HTTPReadTimeout))
	}
	if o.MaxRequestBytes > 0 && o.MaxRequestBytes < minRequestBytes {
		errs = append(errs, fmt.Errorf("%w: --max-request-bytes %d is below %d: ordinary requests (a registry, a list request with selectors) would be refused", ErrInvalidOptions, o.MaxRequestBytes, minRequestBytes))
	}
	return errs
}

// minRequestBytes is the smallest request limit that leaves room for an
// ordinary registry.
const minRequestBytes = 16 << 10

// queryLimits are the query API's limits.
func (o *LimitOptions) queryLimits(conns *connlimit.Limiter) queryapi.Limits {
	return queryapi.Limits{Connections: conns, MaxListObjects: o.MaxListObjects, MaxWatches: o.MaxWatches, MaxWatchesPerClient: o.MaxWatchesPerClient,
		MaxRequestBytes: o.MaxRequestBytes, MaxConcurrentStreams: o.GRPCMaxConcurrentStreams,
		KeepaliveMinTime: o.GRPCKeepaliveMinTime, KeepaliveTime: o.GRPCKeepaliveTime, KeepaliveTimeout: o.GRPCKeepaliveTimeout,
		HTTPReadHeaderTimeout: o.HTTPReadHeaderTimeout, HTTPReadTimeout: o.HTTPReadTimeout, HTTPWriteTimeout: o.HTTPWriteTimeout, HTTPIdleTimeout: o.HTTPIdleTimeout,
		GRPCConnectionTimeout: o.GRPCConnectionTimeout, GRPCMaxConnectionIdle: o.GRPCMaxConnectionIdle}
}

// connections is the limiter of the API's ports. A refused connection
// lingers at most the time its headers may take.
func (o *LimitOptions) connections() *connlimit.Limiter {
	linger := connlimit.DefaultLinger
	if o.HTTPReadHeaderTimeout > 0 && o.HTTPReadHeaderTimeout < linger {
		linger = o.HTTPReadHeaderTimeout
	}
	return connlimit.New(connlimit.Limits{Max: o.MaxConnections, PerClient: o.MaxConnectionsPerClient, Linger: linger,
		MaxFlag: "--max-connections", PerClientFlag: "--max-connections-per-client"})
}

// debugServer bounds the metrics endpoint with the API's timeouts and
// its own small caps: a flood of API connections must not blind the
// scrape that would show it, and a scraper needs few connections.
func (o *LimitOptions) debugServer() debugserver.Options {
	return debugserver.Options{Timeouts: debugserver.Timeouts{ReadHeader: o.HTTPReadHeaderTimeout, Read: o.HTTPReadTimeout, Write: o.HTTPWriteTimeout, Idle: o.HTTPIdleTimeout}}
}

// registerConnectionMetrics exports the API's connection counts.
func registerConnectionMetrics(reg prometheus.Registerer, conns *connlimit.Limiter) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fleetview_api_connections_open",
		Help: "Connections open on the query API's HTTP and gRPC ports (refused ones not counted)."}, func() float64 { return float64(conns.Open()) })
	if err := reg.Register(open); err != nil {
		return err
	}
	for _, r := range []struct {
		reason string
		n      func(connlimit.Refused) uint64
	}{
		{"server", func(r connlimit.Refused) uint64 { return r.Server }},
		{"client", func(r connlimit.Refused) uint64 { return r.Client }},
		{"dropped", func(r connlimit.Refused) uint64 { return r.Dropped }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fleetview_api_connections_refused_total",
			Help:        "Connections refused by --max-connections (server) or --max-connections-per-client (client), and refused ones closed unanswered because too many refusals were pending (dropped).",
			ConstLabels: prometheus.Labels{"reason": r.reason}}, func() float64 { return float64(r.n(conns.Refusals())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// fileReserve is the file descriptors left for everything but the API's
// connections: NATS (its clients in up), Badger's tables and value log,
// the metrics endpoint, OpenSearch clients.
const fileReserve = 2048

// warnFileLimit warns when the process may open fewer files than the
// connection caps allow plus the reserve: the caps would then not be what
// runs out first, and a flood of connections would fail NATS and Badger
// (EMFILE) rather than be refused.
func (o *LimitOptions) warnFileLimit(log *slog.Logger) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	if o.MaxConnections == 0 {
		log.Warn("--max-connections is 0 (no cap): the API's connections are bounded only by the open-file limit NATS and Badger share", "rlimit_nofile", rl.Cur)
		return
	}
	need := uint64(o.MaxConnections) + connlimit.DefaultMaxRefusing + fileReserve
	if rl.Cur < need {
		log.Warn("the open-file limit is below what --max-connections needs: a flood of connections could exhaust it for NATS and Badger; raise it (ulimit -n, LimitNOFILE) or lower --max-connections",
			"rlimit_nofile", rl.Cur, "needed", need, "max_connections", o.MaxConnections, "reserve", fileReserve+connlimit.DefaultMaxRefusing)
	}
}

// snapshots bound the Badger reader's list snapshots.
func (o *LimitOptions) snapshots() badger.ReaderOptions {
	return badger.ReaderOptions{MaxSnapshots: o.MaxListSnapshots, MaxSnapshotsPerClient: o.MaxListSnapshotsPerClient}
}

// pits bound each OpenSearch store's points in time the same way: the
// flags apply to whichever backend serves a list.
func (o *LimitOptions) pits(s *opensearch.Options) {
	s.MaxSnapshots, s.MaxSnapshotsPerClient = o.MaxListSnapshots, o.MaxListSnapshotsPerClient
}

// StreamQuotaOptions set the byte quota of the cluster streams a process
// creates: up (the hub's streams and its in-process collectors') and a
// collector that creates its own stream.
type StreamQuotaOptions struct {
	StreamMaxBytes int64
}

// AddFlags registers the flag.
func (o *StreamQuotaOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&o.StreamMaxBytes, "stream-max-bytes", stream.DefaultMaxBytes,
		"byte quota of each member cluster's NATS stream (its cached state); at the quota a publish that would grow the stream is refused (deletes still pass), "+
			"which the collector logs and reports on the resource in the inventory; JetStream reserves the quota on disk for every stream, so up gives each of its streams an equal share of JetStream's storage instead when its clusters would reserve more (0 = no quota)")
}

// Validate reports every problem at once.
func (o *StreamQuotaOptions) Validate() []error {
	if o.StreamMaxBytes < 0 {
		return []error{fmt.Errorf("%w: --stream-max-bytes must not be negative", ErrInvalidOptions)}
	}
	if o.StreamMaxBytes > 0 && o.StreamMaxBytes < 2*stream.MaxPayload {
		return []error{fmt.Errorf("%w: --stream-max-bytes %d is below twice the largest message (%d bytes)", ErrInvalidOptions, o.StreamMaxBytes, stream.MaxPayload)}
	}
	return nil
}
