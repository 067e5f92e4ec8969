package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/internal/debugserver"
	"github.com/fleetview/fleetview/internal/lifecycle"
	"github.com/fleetview/fleetview/internal/relay"
	"github.com/fleetview/fleetview/internal/stream"
)

// CollectorOptions run one collector against a NATS server.
type CollectorOptions struct {
	Cluster    string
	Kubeconfig string
	Context    string
	NATSURL    string
	// NATSTokenFile holds the hub's NATS token.
	NATSTokenFile string
	// NATSUserFile holds this cluster's own credentials on the hub
	// ("<cluster>:<password>", the cluster's line of the hub's
	// --nats-users-file): they reach only this cluster's stream and keys.
	NATSUserFile string
	// NATSTLSClientOptions check a hub that requires TLS and present the
	// client certificate one requiring mTLS asks for; the same flags as
	// serve's and rebuild's.
	NATSTLSClientOptions
	Labels   map[string]string
	Provider string
	Region   string
	Zone     string
	// ClusterInfoConfigMap is "namespace/name" of a ConfigMap in the member
	// cluster with data keys provider, region, zone, labels; "" disables it.
	ClusterInfoConfigMap string
	Heartbeat            time.Duration
	APIRecheck           time.Duration
	DiscoveryInterval    time.Duration
	PageSize             int64
	// ReconnectBuffer bounds what is buffered while NATS is unreachable;
	// beyond it publishes fail and the collector relists once NATS is back.
	ReconnectBuffer int
	// MetricsOptions serve metrics and Go profiles, unauthenticated:
	// loopback only unless MetricsAllowRemote.
	MetricsOptions
	Compression bool
	// GCPercent is the Go GC target (GOGC); the GOGC environment variable,
	// when set, wins.
	GCPercent int
	// StreamQuota is the byte quota of the cluster's stream when this
	// collector creates it (with a token; per-cluster credentials bind to
	// the stream the hub created with its own quota).
	StreamQuota StreamQuotaOptions
	// PublishAckTimeout bounds the wait for a publish acknowledgement. A
	// publish JetStream dropped while its stream elected a leader is only
	// noticed then (and repaired by a relist), and with the window of
	// unacknowledged publishes full the collector waits for it: after a
	// NATS server of a cluster dies mid-ingest, the stall is about this.
	PublishAckTimeout time.Duration
	// Replicas is the replica count of the stream and buckets when this
	// collector creates them (with a token; per-cluster credentials bind
	// to what the hub created).
	Replicas ReplicaOptions
	// ActThrough lists the classes of request the hub may forward to this
	// member through the collector, as the caller (writes, logs, reads;
	// "" = none, the default; issue #30).
	ActThrough string
}

// AddFlags registers the flags.
func (o *CollectorOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Cluster, "cluster", "", "name of the member cluster (a DNS label)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster (empty: in-cluster config)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context")
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL, or the comma-separated URLs of a NATS cluster's servers (the collector fails over between them); tls:// for TLS (a hub reached across a network should require it)")
	fs.StringVar(&o.NATSTokenFile, "nats-token-file", "", "file holding the hub's NATS token")
	fs.StringVar(&o.NATSUserFile, "nats-user-file", "", "file holding this cluster's NATS credentials on the hub (<cluster>:<password>, its line of the hub's --nats-users-file)")
	o.NATSTLSClientOptions.AddFlags(fs)
	fs.StringToStringVar(&o.Labels, "labels", nil, "cluster labels for ClusterAffinity (k=v,...); merged over the cluster-info ConfigMap's")
	fs.StringVar(&o.Provider, "provider", "", "cluster provider (ClusterAffinity fieldSelector); overrides the cluster-info ConfigMap")
	fs.StringVar(&o.Region, "region", "", "cluster region (ClusterAffinity fieldSelector); overrides the cluster-info ConfigMap")
	fs.StringVar(&o.Zone, "zone", "", "cluster zone (ClusterAffinity fieldSelector); overrides the cluster-info ConfigMap")
	fs.StringVar(&o.ClusterInfoConfigMap, "cluster-info-configmap", collector.DefaultClusterInfoConfigMap,
		"namespace/name of a ConfigMap in the member cluster describing it (data keys provider, region, zone, labels=\"k=v,k2=v2\"); empty disables")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 10*time.Second, "inventory heartbeat interval (an unreachable apiserver is reported not ready within this plus 5s)")
	fs.DurationVar(&o.APIRecheck, "api-recheck-interval", 30*time.Second, "how often selected resources the cluster does not serve (e.g. CRD not installed) are looked up again")
	fs.DurationVar(&o.DiscoveryInterval, "discovery-interval", 5*time.Second, "how often the cluster's discovery is read again while a registry selecting it has a wildcard selector, so a CRD installed or removed is cached or dropped within this time")
	fs.Int64Var(&o.PageSize, "page-size", collector.DefaultPageSize, "list page size; pages are streamed object by object, so memory does not grow with it, and bigger pages cost the apiserver fewer requests but more work per request")
	fs.IntVar(&o.ReconnectBuffer, "nats-reconnect-buffer", 64<<20, "bytes of publishes buffered while NATS is unreachable; beyond it a watch stops and resumes from its last acknowledged resourceVersion after reconnecting")
	fs.BoolVar(&o.Compression, "apiserver-compression", false, "ask the member apiserver for gzip-compressed responses (worth it only across slow links: it costs both sides CPU)")
	fs.IntVar(&o.GCPercent, "gc-percent", 50, "Go GC target percentage (GOGC; the environment variable wins): the collector's heap is mostly its per-object index, so a lower target trades a little CPU for less memory")
	o.MetricsOptions.AddFlags(fs)
	o.StreamQuota.AddFlags(fs)
	o.Replicas.AddFlags(fs)
	fs.StringVar(&o.ActThrough, "act-through", "", "forward the hub's requests of these classes to the member as the caller (comma-separated: writes, logs, reads, proxy; empty: none; proxy, the nodes/, pods/ and services/{name}/proxy subresources, is exec-equivalent and needs the hub's --act-through-proxy too). The collector's own credentials need only the impersonate verb on users and groups for this: the member's RBAC and admission decide every request")
	fs.DurationVar(&o.PublishAckTimeout, "publish-ack-timeout", 30*time.Second, "how long a publish waits for its acknowledgement before the collector relists to repair it; on a NATS cluster a shorter one (5s) shortens the stall when a stream's leader dies mid-ingest, at the risk of needless relists on a slow server")
}

// Validate reports every problem at once.
func (o *CollectorOptions) Validate() []error {
	var errs []error
	if o.Cluster == "" {
		errs = append(errs, fmt.Errorf("%w: --cluster is required", ErrInvalidOptions))
	} else if err := stream.ValidateCluster(o.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("%w: --cluster: %v", ErrInvalidOptions, err))
	}
	for k, v := range o.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --labels key %q: %s", ErrInvalidOptions, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --labels value %q: %s", ErrInvalidOptions, v, strings.Join(msgs, "; ")))
		}
	}
	if o.ClusterInfoConfigMap != "" {
		if _, _, err := collector.ParseClusterInfoConfigMap(o.ClusterInfoConfigMap); err != nil {
			errs = append(errs, fmt.Errorf("%w: --cluster-info-configmap %q: want namespace/name", ErrInvalidOptions, o.ClusterInfoConfigMap))
		}
	}
	if o.NATSTokenFile != "" && o.NATSUserFile != "" {
		errs = append(errs, fmt.Errorf("%w: --nats-token-file and --nats-user-file cannot be combined", ErrInvalidOptions))
	}
	errs = append(errs, o.NATSTLSClientOptions.Validate()...)
	if o.Heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("%w: --heartbeat must be positive", ErrInvalidOptions))
	}
	if o.APIRecheck <= 0 {
		errs = append(errs, fmt.Errorf("%w: --api-recheck-interval must be positive", ErrInvalidOptions))
	}
	if o.DiscoveryInterval <= 0 {
		errs = append(errs, fmt.Errorf("%w: --discovery-interval must be positive", ErrInvalidOptions))
	}
	if o.PageSize <= 0 {
		errs = append(errs, fmt.Errorf("%w: --page-size must be positive", ErrInvalidOptions))
	}
	if o.ReconnectBuffer <= 0 {
		errs = append(errs, fmt.Errorf("%w: --nats-reconnect-buffer must be positive", ErrInvalidOptions))
	}
	if o.GCPercent <= 0 {
		errs = append(errs, fmt.Errorf("%w: --gc-percent must be positive", ErrInvalidOptions))
	}
	errs = append(errs, o.StreamQuota.Validate()...)
	errs = append(errs, o.Replicas.Validate()...)
	errs = append(errs, validateNATSURLs(o.NATSURL)...)
	if _, err := collector.ParseActClasses(o.ActThrough); err != nil {
		errs = append(errs, fmt.Errorf("%w: --act-through: %v", ErrInvalidOptions, err))
	}
	if o.PublishAckTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: --publish-ack-timeout must not be negative", ErrInvalidOptions))
	}
	return append(errs, o.MetricsOptions.Validate()...)
}

// MetricsConfig is CollectorOptions validated, with the kubeconfig and
// the NATS credentials read.
type MetricsConfig struct {
	CollectorOptions
	collector collector.Config
	natsAuth  []nats.Option
	act       collector.ActClasses
}

// Config validates the options (every error at once) and reads the files
// they name.
func (o CollectorOptions) Config(log *slog.Logger) (MetricsConfig, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return MetricsConfig{}, errors.Join(errs...)
	}
	rc, err := restConfig(o.Kubeconfig, o.Context)
	if err != nil {
		return MetricsConfig{}, err
	}
	tokOpts, apiPrefix, err := o.natsOptions()
	if err != nil {
		return MetricsConfig{}, err
	}
	act, _ := collector.ParseActClasses(o.ActThrough)
	return MetricsConfig{CollectorOptions: o, natsAuth: tokOpts, act: act, collector: collector.Config{
		Cluster: o.Cluster, REST: rc, Labels: o.Labels, Provider: o.Provider, Region: o.Region, Zone: o.Zone,
		ClusterInfoConfigMap: o.ClusterInfoConfigMap, HeartbeatInterval: o.Heartbeat, RecheckInterval: o.APIRecheck, DiscoveryInterval: o.DiscoveryInterval,
		PageSize: o.PageSize, Compression: o.Compression, HubAPIPrefix: apiPrefix, StreamMaxBytes: o.StreamQuota.StreamMaxBytes,
		Replicas: o.Replicas.replicas(), PublishAckTimeout: o.PublishAckTimeout, Logger: log,
	}}, nil
}

// natsOptions are how the collector connects to the hub: its credentials
// (and the hub's JetStream API prefix they need, if any) and TLS.
func (o CollectorOptions) natsOptions() (opts []nats.Option, apiPrefix string, err error) {
	opts, apiPrefix, err = collectorNATSAuth(o)
	if err != nil {
		return nil, "", err
	}
	tlsOpts, err := o.NATSTLSClientOptions.natsOptions()
	if err != nil {
		return nil, "", err
	}
	return append(opts, tlsOpts...), apiPrefix, nil
}

// RunCollector runs one collector until ctx ends. It keeps running while
// NATS is unreachable (at start too) and catches up after. Start order:
// NATS, the metrics server, the act-through server (when on), the
// collector; stop order: the collector (which flushes) and the act-through
// server at once, then the metrics server, then NATS.
func RunCollector(ctx context.Context, o CollectorOptions, log *slog.Logger) error {
	cfg, err := o.Config(log)
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.GCPercent)
	}
	cc := cfg.collector
	var reg *prometheus.Registry
	return lifecycle.Lifecycle{
		Groups: []lifecycle.Group{
			{Name: groupNATS, Build: func(context.Context) ([]lifecycle.Runnable, error) {
				nc, err := nats.Connect(o.NATSURL, append(cfg.natsAuth, nats.Name("fleetview-collector-"+o.Cluster),
					nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(true),
					nats.ReconnectBufSize(o.ReconnectBuffer),
					nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected; buffering", "err", err) }),
					nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS reconnected") }))...)
				if err != nil {
					return nil, fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
				}
				cc.NATS = nc
				return []lifecycle.Runnable{closeNATS(nc)}, nil
			}},
			{Name: groupMetrics, Build: func(context.Context) ([]lifecycle.Runnable, error) {
				if o.MetricsAddr == "" {
					return nil, nil
				}
				reg = newMetricsRegistry()
				srv, err := o.startMetrics(reg, debugserver.Options{})
				if err != nil {
					return nil, err
				}
				log.Info("metrics listening", "addr", srv.Addr())
				return []lifecycle.Runnable{lifecycle.Closer(srv.Close)}, nil
			}},
			{Name: groupActThrough, Build: func(context.Context) ([]lifecycle.Runnable, error) {
				if !cfg.act.Any() {
					return nil, nil
				}
				act, err := collector.NewActThrough(cc.REST, cfg.act)
				if err != nil {
					return nil, err
				}
				rs, err := relay.NewServer(cc.NATS, o.Cluster, act, relay.ServerLimits{}, log)
				if err != nil {
					return nil, err
				}
				log.Info("act-through on", "writes", cfg.act.Writes, "logs", cfg.act.Logs, "reads", cfg.act.Reads)
				return []lifecycle.Runnable{rs}, nil
			}},
			{Name: groupCollectors, Build: func(context.Context) ([]lifecycle.Runnable, error) {
				col, err := collector.New(cc)
				if err != nil {
					return nil, err
				}
				if reg != nil {
					if err := reg.Register(col.PrometheusCollector()); err != nil {
						return nil, err
					}
				}
				return []lifecycle.Runnable{col}, nil
			}},
		},
		Stop: [][]string{{groupCollectors, groupActThrough}, {groupMetrics}, {groupNATS}},
	}.Run(ctx)
}
