package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
)

// natsTokenOption is the client option sending the shared token in file
// (natsserver.ReadToken); none without a file.
func natsTokenOption(file string) ([]nats.Option, error) {
	tok, err := natsserver.ReadToken(file)
	if err != nil {
		return nil, fmt.Errorf("%w: --nats-token-file: %w", ErrInvalidOptions, err)
	}
	if tok == "" {
		return nil, nil
	}
	return []nats.Option{nats.Token(tok)}, nil
}

// readCredentialLines reads the <cluster>:<password> lines of the file flag
// names (natsserver.ReadClusterUsers): the hub's --nats-users-file holds
// one per member cluster, a collector's --nats-user-file holds its own.
func readCredentialLines(flag, file string) ([]natsserver.ClusterUser, error) {
	users, err := natsserver.ReadClusterUsers(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidOptions, flag, err)
	}
	return users, nil
}

// collectorNATSAuth is how a collector authenticates: its cluster's
// credentials (then it reaches the hub's JetStream through the API prefix,
// with the cluster's inbox prefix), the hub's shared token, or nothing.
func collectorNATSAuth(o CollectorOptions) (opts []nats.Option, apiPrefix string, err error) {
	if o.NATSUserFile == "" {
		opts, err = natsTokenOption(o.NATSTokenFile)
		return opts, "", err
	}
	users, err := readCredentialLines("--nats-user-file", o.NATSUserFile)
	if err != nil {
		return nil, "", err
	}
	u := users[0]
	if len(users) > 1 || u.Cluster != o.Cluster {
		return nil, "", fmt.Errorf("%w: --nats-user-file %s must hold exactly one line, for --cluster %s", ErrInvalidOptions, o.NATSUserFile, o.Cluster)
	}
	return u.ClientOptions(), natsserver.APIPrefix, nil
}

// validateNATSAuth checks how up's embedded server authenticates clients.
func (o *UpOptions) validateNATSAuth() []error {
	var errs []error
	if o.NATSTokenFile != "" && o.NATSUsersFile != "" {
		errs = append(errs, fmt.Errorf("%w: --nats-token-file and --nats-users-file cannot be combined (the users file gives each cluster its own credentials)", ErrInvalidOptions))
	}
	host := o.NATSHost
	if host == "" {
		host = "127.0.0.1"
	}
	if o.NATSHubPasswordFile != "" && o.NATSUsersFile == "" {
		errs = append(errs, fmt.Errorf("%w: --nats-hub-password-file needs --nats-users-file (without per-cluster users there is no hub user; clients send --nats-token-file)", ErrInvalidOptions))
	}
	if set := o.clientOnly(); len(set) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s: up runs its own NATS server and connects to it itself (they are for serve and rebuild)", ErrInvalidOptions, strings.Join(set, ", ")))
	}
	if o.NATSTokenFile == "" && o.NATSUsersFile == "" && !o.Auth.AllowUnauthenticated && !isLoopback(net.JoinHostPort(host, "0")) {
		errs = append(errs, fmt.Errorf("%w: --nats-host %s is not a loopback address and neither --nats-users-file nor --nats-token-file is set: anyone reaching it could write any cluster's stream (or set --insecure-allow-unauthenticated)", ErrInvalidOptions, host))
	}
	return errs
}

// natsServerConfig is the configuration of up's embedded NATS server its
// flags give.
func (o UpOptions) natsServerConfig(onRefused func(cluster, reason string)) natsserver.Config {
	return natsserver.Config{StoreDir: filepath.Join(o.StateDir, "nats"), Host: o.NATSHost, Port: o.NATSPort, ServerName: o.NATSCluster.ServerName,
		TokenFile: o.NATSTokenFile, UsersFile: o.NATSUsersFile, HubPasswordFile: o.NATSHubPasswordFile,
		TLS: o.NATSTLS.files(), Cluster: o.NATSCluster.config(), Quotas: o.NATSCollectorQuotas.Quotas, OnRefused: onRefused}
}

// natsServerOptions reads the files of natsServerConfig.
func (o UpOptions) natsServerOptions(log *slog.Logger, onRefused func(cluster, reason string)) (natsserver.Options, error) {
	so, err := o.natsServerConfig(onRefused).Options(log)
	if err != nil {
		return natsserver.Options{}, fmt.Errorf("%w: embedded NATS: %w", ErrInvalidOptions, err)
	}
	return so, nil
}

// startEmbeddedNATS starts up's NATS server and connects the hub's own
// components to it. With --nats-users-file each listed cluster gets its own
// account (natsserver/accounts.go), and the hub creates the clusters'
// streams and the shared buckets, which those credentials may not.
//
// onRefused counts the guard's refusals of those clusters' requests.
func startEmbeddedNATS(ctx context.Context, o UpOptions, log *slog.Logger, onRefused func(cluster, reason string)) (*natsserver.Server, *nats.Conn, int64, error) {
	so, err := o.natsServerOptions(log, onRefused)
	if err != nil {
		return nil, nil, 0, err
	}
	if so.TLS == nil && !isLoopback(net.JoinHostPort(cmp.Or(o.NATSHost, "127.0.0.1"), "0")) {
		log.Warn("embedded NATS listens beyond loopback without TLS: credentials and every object cross the network in clear (set --nats-tls-cert-file and --nats-tls-key-file)", "host", o.NATSHost)
	}
	if so.Cluster.Name != "" && so.Cluster.TLS == nil && so.TLS != nil {
		log.Warn("clients of the embedded NATS use TLS but the routes between cluster members do not: every object crosses between hubs in clear (set --nats-cluster-tls-cert-file, --nats-cluster-tls-key-file and --nats-cluster-tls-ca-file), or keep them on a private network")
	}
	ns, err := natsserver.Start(so)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w (--nats-users-file)", err)
	}
	nc, err := ns.ConnectHub(nats.Name("fleetview-up"), nats.MaxReconnects(-1))
	if err != nil {
		ns.Shutdown()
		return nil, nil, 0, err
	}
	if so.Cluster.Name != "" {
		log.Info("embedded NATS: cluster member; waiting for JetStream", "cluster", so.Cluster.Name, "server", so.ServerName, "routes", len(so.Cluster.Routes))
	}
	if err := waitJetStream(ctx, nc, log); err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, nil, 0, err
	}
	quota, err := natsserver.StreamQuota(o.StreamQuota.StreamMaxBytes, len(so.Clusters)+len(o.Contexts), ns.StoreBytes())
	if err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, nil, 0, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if quota != o.StreamQuota.StreamMaxBytes {
		log.Warn("the member clusters' stream quotas would reserve more than JetStream's storage: each stream gets an equal share instead (JetStream reserves every stream's quota on disk when it is created)",
			"clusters", len(so.Clusters)+len(o.Contexts), "--stream-max-bytes", o.StreamQuota.StreamMaxBytes, "jetstreamStoreBytes", ns.StoreBytes(), "quota", quota)
	}
	clusters := len(so.Clusters) + len(o.Contexts)
	storeClusters := 0
	if quota > 0 {
		storeClusters = int(ns.StoreBytes() / 10 * 9 / quota)
	}
	memLimit, from, _ := o.Memory.limit() // validated with the options
	checkFleetSize(clusters, readHostLimits(memLimit, from, storeClusters)).log(log)
	if err := provision(ctx, nc, so.Clusters, o.Replicas.replicas(), quota, o.History.streamDepth(), log); err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, nil, 0, err
	}
	if len(so.Clusters) > 0 {
		log.Info("embedded NATS: per-cluster credentials", "clusters", len(so.Clusters))
	}
	if so.TLS != nil {
		log.Info("embedded NATS: TLS required", "client_certificates", so.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	}
	return ns, nc, quota, nil
}

// provision creates the buckets and each credentialed cluster's stream,
// each in its own bounded, retried attempt (retryJetStream), a few at a
// time. One attempt for all of them timed out at 2,000 clusters: JetStream
// creates a stream in a few milliseconds, but 2,000 of them in a row
// outlast any one attempt, and every retry began again from the first.
func provision(ctx context.Context, nc *nats.Conn, clusters []natsserver.ClusterUser, replicas int, maxBytes int64, depth int, log *slog.Logger) error {
	if len(clusters) == 0 {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := retryJetStream(ctx, log, "buckets", func(ctx context.Context) error {
		if _, err := regstore.Open(ctx, js, replicas); err != nil {
			return err
		}
		_, err := inventory.Bucket(ctx, js, replicas)
		return err
	}); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(provisionConcurrency)
	for _, c := range clusters {
		g.Go(func() error {
			return retryJetStream(gctx, log, "stream of "+c.Cluster, func(ctx context.Context) error {
				_, kept, err := stream.EnsureStream(ctx, js, c.Cluster, replicas, maxBytes, depth)
				if err != nil {
					return fmt.Errorf("create stream of %s: %w", c.Cluster, err)
				}
				if kept > 0 {
					log.Warn("a cluster's stream already holds more than --stream-max-bytes; its quota is raised to its size so nothing is dropped, and growth is refused", "stream", stream.StreamName(c.Cluster), "bytes", kept, "quota", maxBytes)
				}
				return nil
			})
		})
	}
	return g.Wait()
}

// provisionConcurrency is how many cluster streams provision creates at
// once: enough to keep JetStream's API busy while one stream's files are
// written, few enough that no request waits behind a queue long enough to
// time out.
const provisionConcurrency = 8

// NATSServerTLSOptions make up's embedded NATS server require TLS of every
// client that connects over the network (the hub's own components connect
// in process), and, with a client CA, client certificates it signed.
type NATSServerTLSOptions struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
}

// AddFlags registers the flags.
func (o *NATSServerTLSOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CertFile, "nats-tls-cert-file", "", "serving certificate of the embedded NATS server: set, clients must connect with TLS (tls://; collectors: --nats-ca-file); replaced files are served from the next connection on, without a restart")
	fs.StringVar(&o.KeyFile, "nats-tls-key-file", "", "key of --nats-tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "nats-tls-client-ca-file", "", "CA that signs NATS clients' certificates: set, every network client must present one (mTLS; collectors: --nats-client-cert-file), on top of its token or password")
}

// Validate reports every problem at once.
func (o *NATSServerTLSOptions) Validate() []error {
	var errs []error
	for _, f := range []struct{ flag, path string }{
		{"--nats-tls-cert-file", o.CertFile}, {"--nats-tls-key-file", o.KeyFile}, {"--nats-tls-client-ca-file", o.ClientCAFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, f.flag, err))
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%w: --nats-tls-cert-file and --nats-tls-key-file go together", ErrInvalidOptions))
	}
	if o.ClientCAFile != "" && o.CertFile == "" {
		errs = append(errs, fmt.Errorf("%w: --nats-tls-client-ca-file needs --nats-tls-cert-file (client certificates are checked in the TLS handshake)", ErrInvalidOptions))
	}
	return errs
}

// files is the configuration the options give.
func (o *NATSServerTLSOptions) files() natsserver.TLSFiles {
	return natsserver.TLSFiles{CertFile: o.CertFile, KeyFile: o.KeyFile, ClientCAFile: o.ClientCAFile}
}
