package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/internal/lifecycle"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/relay"
	"github.com/fleetview/fleetview/internal/stream"
)

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
	// NATSHubPasswordFile holds the password of the hub's own NATS user
	// (natsserver.HubUser) with NATSUsersFile; empty makes a random one
	// that never leaves the process, so no other process (rebuild, a
	// separate serve) can connect.
	NATSHubPasswordFile string
	// StreamQuota is the byte quota of the cluster streams up creates
	// (credentialed clusters' and its in-process collectors').
	StreamQuota StreamQuotaOptions
	// NATSTLS makes the embedded server require TLS of remote clients.
	NATSTLS NATSServerTLSOptions
	// NATSCluster makes the embedded server a member of a NATS cluster.
	NATSCluster NATSClusterOptions
	// NATSCollectorQuotas bound each credentialed cluster's share of the
	// hub (with NATSUsersFile).
	NATSCollectorQuotas NATSCollectorQuotaOptions
}

// AddFlags registers the flags.
func (o *UpOptions) AddFlags(fs *pflag.FlagSet) {
	o.ServeOptions.AddFlags(fs)
	o.StreamQuota.AddFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig holding the member clusters' contexts")
	fs.StringSliceVar(&o.Contexts, "context", nil, "kubeconfig context of a member cluster (repeatable); the member cluster is named after it")
	fs.StringVar(&o.NATSHost, "nats-host", "127.0.0.1", "address the embedded NATS server listens on (remote collectors connect to it)")
	fs.IntVar(&o.NATSPort, "nats-port", 4222, "port of the embedded NATS server (-1 = any free port)")
	fs.StringVar(&o.NATSUsersFile, "nats-users-file", "", "per-cluster NATS credentials of remote collectors, one <cluster>:<password> line each: a cluster's credentials reach only its own stream and keys")
	o.NATSTLS.AddFlags(fs)
	o.NATSCluster.AddFlags(fs)
	o.NATSCollectorQuotas.AddFlags(fs)
	fs.StringVar(&o.NATSHubPasswordFile, "nats-hub-password-file", "", "with --nats-users-file: password of the hub's own NATS user "+natsserver.HubUser+
		", which reaches every stream (fleetview rebuild connects with --nats-user "+natsserver.HubUser+" --nats-password-file); empty: random, never leaving the process")
}

// Validate reports every problem at once.
func (o *UpOptions) Validate() []error {
	errs := o.ServeOptions.validate(false)
	// No --context is the hub mode: collectors run in the member clusters
	// and connect to the embedded NATS server.
	errs = append(errs, o.validateNATSAuth()...)
	errs = append(errs, o.StreamQuota.Validate()...)
	errs = append(errs, o.NATSTLS.Validate()...)
	errs = append(errs, o.NATSCluster.Validate(o.Auth.AllowUnauthenticated)...)
	errs = append(errs, o.NATSCollectorQuotas.Validate()...)
	if r := o.Replicas.replicas(); r > 1 && !o.NATSCluster.clustered() {
		errs = append(errs, fmt.Errorf("%w: --stream-replicas %d needs a NATS cluster (--nats-cluster-name, --nats-cluster-listen, --nats-routes, --nats-server-name): a single server keeps one copy", ErrInvalidOptions, r))
	} else if m := o.NATSCluster.members(); r > 1 && r > m {
		errs = append(errs, fmt.Errorf("%w: --stream-replicas %d exceeds the %d cluster members --nats-cluster-listen and --nats-routes name", ErrInvalidOptions, r, m))
	}
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

// UpConfig is UpOptions validated, with their files read.
type UpConfig struct {
	ServeConfig
	collectors []collector.Config
}

// Config validates the options (every error at once), reads the files
// they name and the kubeconfig's contexts.
func (o UpOptions) Config(log *slog.Logger) (UpConfig, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return UpConfig{}, errors.Join(errs...)
	}
	sc, err := o.ServeOptions.config()
	if err != nil {
		return UpConfig{}, err
	}
	c := UpConfig{ServeConfig: sc}
	for _, ctxName := range o.Contexts {
		rc, err := restConfig(o.Kubeconfig, ctxName)
		if err != nil {
			return UpConfig{}, err
		}
		// StreamDepth: the embedded collectors create their streams as
		// deep as the hub makes them, so no change is superseded before
		// the materializer's first discovery raises the depth.
		c.collectors = append(c.collectors, collector.Config{Cluster: ctxName, REST: rc, StreamMaxBytes: o.StreamQuota.StreamMaxBytes,
			StreamDepth: o.History.streamDepth(), Replicas: o.Replicas.replicas(), Logger: log})
	}
	return c, nil
}

// RunUp runs an embedded NATS server, the materializers and their stores,
// the query API and one collector per context, until ctx ends. Stop order:
// the query API and the collectors at once (the collectors flush into
// NATS), then the materializers drain and the stores close (after the API,
// so no request in flight meets a closed store), the metrics server, and
// NATS last.
func RunUp(ctx context.Context, o UpOptions, log *slog.Logger) error {
	cfg, err := o.Config(log)
	if err != nil {
		return err
	}
	defer cfg.security.close()
	refused := guardRefusals()
	sv := newServe(cfg.ServeConfig, log)
	embedded := lifecycle.Group{Name: groupNATS, Build: func(ctx context.Context) ([]lifecycle.Runnable, error) {
		ns, nc, quota, err := startEmbeddedNATS(ctx, o, log, func(cluster, reason string) { refused.WithLabelValues(cluster, reason).Inc() })
		if err != nil {
			return nil, err
		}
		for i := range cfg.collectors {
			cfg.collectors[i].StreamMaxBytes = quota // the hub's share, not the flag's
			cfg.collectors[i].NATS = nc
		}
		log.Info("embedded NATS running", "url", ns.ClientURL(), "collectors", len(cfg.collectors))
		sv.nc = nc
		return []lifecycle.Runnable{closeNATS(nc), lifecycle.Closer(func() error { ns.Shutdown(); return nil })}, nil
	}}
	collectors := lifecycle.Group{Name: groupCollectors, Build: func(context.Context) ([]lifecycle.Runnable, error) {
		if sv.registry != nil && o.NATSUsersFile != "" {
			if err := sv.registry.Register(refused); err != nil {
				return nil, err
			}
		}
		return upCollectors(cfg.collectors, o.ActThrough, o.ActThroughProxy, sv, log)
	}}
	groups := append([]lifecycle.Group{embedded}, sv.groups()...)
	return lifecycle.Lifecycle{
		Groups: append(groups, collectors),
		Stop:   [][]string{{groupAPI, groupCollectors}, {groupStore}, {groupMetrics}, {groupNATS}},
	}.Run(ctx)
}

// upCollectors are up's in-process collectors, and with act-through their
// relay servers.
func upCollectors(ccs []collector.Config, actThrough, proxy bool, sv *serve, log *slog.Logger) ([]lifecycle.Runnable, error) {
	var rs []lifecycle.Runnable
	for _, cc := range ccs {
		col, err := collector.New(cc)
		if err != nil {
			return nil, err
		}
		if sv.registry != nil {
			if err := sv.registry.Register(col.PrometheusCollector()); err != nil {
				return nil, err
			}
		}
		rs = append(rs, col)
		if !actThrough {
			continue
		}
		// In one process the hub's forwarding reaches its own
		// collectors: every class, as the caller, on the context's
		// credentials (which need impersonate).
		act, err := collector.NewActThrough(cc.REST, collector.ActClasses{Writes: true, Logs: true, Reads: true, Proxy: proxy})
		if err != nil {
			return nil, err
		}
		srv, err := relay.NewServer(cc.NATS, cc.Cluster, act, relay.ServerLimits{}, log)
		if err != nil {
			return nil, err
		}
		rs = append(rs, srv)
	}
	return rs, nil
}
