package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer/badger"
	"github.com/fleetview/fleetview/materializer/opensearch"
	"github.com/fleetview/fleetview/queryapi"
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
}

// Validate reports every problem at once.
func (o *LimitOptions) Validate() []error {
	var errs []error
	for flag, v := range map[string]int64{"--max-list-objects": o.MaxListObjects, "--max-watches": int64(o.MaxWatches),
		"--max-watches-per-client": int64(o.MaxWatchesPerClient), "--max-request-bytes": o.MaxRequestBytes,
		"--max-list-snapshots": int64(o.MaxListSnapshots), "--max-list-snapshots-per-client": int64(o.MaxListSnapshotsPerClient),
		"--grpc-keepalive-min-time": int64(o.GRPCKeepaliveMinTime), "--grpc-keepalive-time": int64(o.GRPCKeepaliveTime),
		"--grpc-keepalive-timeout": int64(o.GRPCKeepaliveTimeout)} {
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
	if o.MaxRequestBytes > 0 && o.MaxRequestBytes < minRequestBytes {
		errs = append(errs, fmt.Errorf("%w: --max-request-bytes %d is below %d: ordinary requests (a registry, a list request with selectors) would be refused", ErrInvalidOptions, o.MaxRequestBytes, minRequestBytes))
	}
	return errs
}

// minRequestBytes is the smallest request limit that leaves room for an
// ordinary registry.
const minRequestBytes = 16 << 10

// queryLimits are the query API's limits.
func (o *LimitOptions) queryLimits() queryapi.Limits {
	return queryapi.Limits{MaxListObjects: o.MaxListObjects, MaxWatches: o.MaxWatches, MaxWatchesPerClient: o.MaxWatchesPerClient,
		MaxRequestBytes: o.MaxRequestBytes, MaxConcurrentStreams: o.GRPCMaxConcurrentStreams,
		KeepaliveMinTime: o.GRPCKeepaliveMinTime, KeepaliveTime: o.GRPCKeepaliveTime, KeepaliveTimeout: o.GRPCKeepaliveTimeout}
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
			"which the collector logs and reports on the resource in the inventory; JetStream reserves the quota on disk for every stream (0 = no quota)")
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
