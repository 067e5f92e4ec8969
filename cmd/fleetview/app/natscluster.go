package app

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
)

// ReplicaOptions say how many copies JetStream keeps of what fleetview
// creates: the cluster streams, the buckets, the dead letters. 1 on a
// single server; 3 (or 5) on a JetStream cluster, which then survives
// the loss of one (or two) of its servers without losing or stalling for
// long.
type ReplicaOptions struct {
	StreamReplicas int
}

// AddFlags registers the flags.
func (o *ReplicaOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.StreamReplicas, "stream-replicas", 1, "copies JetStream keeps of fleetview's streams and KV buckets: 1, or 3 or 5 on a NATS cluster (existing streams and buckets are moved to this count)")
}

// Validate reports every problem at once. 0 (options built without
// their flags) is the default, 1.
func (o *ReplicaOptions) Validate() []error {
	if err := natsnames.ValidateReplicas(o.replicas()); err != nil {
		return []error{fmt.Errorf("%w: --stream-replicas: %w", ErrInvalidOptions, err)}
	}
	return nil
}

// replicas is the count asked for, 1 by default.
func (o *ReplicaOptions) replicas() int {
	if o.StreamReplicas == 0 {
		return 1
	}
	return o.StreamReplicas
}

// NATSClusterOptions make up's embedded NATS server a member of a NATS
// cluster: three hubs, each started with the routes of all three, form a
// JetStream cluster of their own, and streams with --stream-replicas 3
// survive the loss of any one of them.
type NATSClusterOptions struct {
	// Name is shared by every member.
	Name string
	// Listen is the host:port of this member's route listener.
	Listen string
	// Routes are the nats://host:port route addresses of every member.
	Routes []string
	// ServerName names this member; JetStream needs it unique in the
	// cluster and stable across restarts (it finds its state by it).
	ServerName string
	// PasswordFile holds the password every route must present, the same
	// on every member.
	PasswordFile string
	// TLSCertFile and TLSKeyFile are this member's route certificate,
	// served and presented when dialling (reloaded when they change);
	// TLSCAFile holds the CAs a member's certificate must be signed by.
	TLSCertFile, TLSKeyFile, TLSCAFile string
}

// AddFlags registers the flags.
func (o *NATSClusterOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "nats-cluster-name", "", "name of the NATS cluster the embedded server joins, the same on every member (set with --nats-cluster-listen, --nats-routes and --nats-server-name)")
	fs.StringVar(&o.Listen, "nats-cluster-listen", "", "host:port the embedded server accepts routes from the other cluster members on")
	fs.StringSliceVar(&o.Routes, "nats-routes", nil, "route URLs of the cluster's members, nats://host:port, comma-separated or repeated (this member's own may be listed: a server skips the route to itself)")
	fs.StringVar(&o.ServerName, "nats-server-name", "", "name of this embedded NATS server, unique in the cluster and stable across restarts (default fleetview without a cluster)")
	fs.StringVar(&o.PasswordFile, "nats-cluster-password-file", "", "file holding the password routes between cluster members present, the same on every member (required when --nats-cluster-listen is not loopback, unless routes use TLS)")
	fs.StringVar(&o.TLSCertFile, "nats-cluster-tls-cert-file", "", "PEM certificate this member serves and dials its routes with (server and client use; with --nats-cluster-tls-key-file and --nats-cluster-tls-ca-file): routes are encrypted and only members with a certificate the CAs signed join")
	fs.StringVar(&o.TLSKeyFile, "nats-cluster-tls-key-file", "", "PEM private key of --nats-cluster-tls-cert-file")
	fs.StringVar(&o.TLSCAFile, "nats-cluster-tls-ca-file", "", "PEM CAs that sign the cluster members' route certificates")
}

// config is the configuration the options give.
func (o *NATSClusterOptions) config() natsserver.ClusterConfig {
	return natsserver.ClusterConfig{Name: o.Name, Listen: o.Listen, Routes: o.Routes, PasswordFile: o.PasswordFile,
		TLSCertFile: o.TLSCertFile, TLSKeyFile: o.TLSKeyFile, TLSCAFile: o.TLSCAFile}
}

// routeTLS reports whether routes use TLS.
func (o *NATSClusterOptions) routeTLS() bool { return o.config().RouteTLS() }

// clustered reports whether any cluster flag is set.
func (o *NATSClusterOptions) clustered() bool { return o.config().Clustered() }

// Validate reports every problem at once. allowInsecure is
// --insecure-allow-unauthenticated: routes without a password beyond
// loopback.
func (o *NATSClusterOptions) Validate(allowInsecure bool) []error {
	if !o.clustered() {
		return nil
	}
	var errs []error
	if o.Name == "" || o.Listen == "" || len(o.Routes) == 0 || o.ServerName == "" {
		errs = append(errs, fmt.Errorf("%w: --nats-cluster-name, --nats-cluster-listen, --nats-routes and --nats-server-name go together (JetStream clusters need a shared name and a unique server name per member)", ErrInvalidOptions))
	}
	if strings.ContainsAny(o.Name, " \t.*>") {
		errs = append(errs, fmt.Errorf("%w: --nats-cluster-name %q: no spaces, dots or wildcards", ErrInvalidOptions, o.Name))
	}
	if o.ServerName != "" {
		// A DNS label: it shows in logs, metrics and the streams'
		// cluster information, and names no more than a host would.
		if msgs := validation.IsDNS1123Label(o.ServerName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: --nats-server-name %q: %s", ErrInvalidOptions, o.ServerName, strings.Join(msgs, "; ")))
		}
	}
	if o.Listen != "" {
		if _, port, err := net.SplitHostPort(o.Listen); err != nil || port == "" || port == "0" {
			errs = append(errs, fmt.Errorf("%w: --nats-cluster-listen %q: want host:port with a fixed port (the other members' routes name it)", ErrInvalidOptions, o.Listen))
		} else if o.PasswordFile == "" && !o.routeTLS() && !allowInsecure && !isLoopback(o.Listen) {
			errs = append(errs, fmt.Errorf("%w: --nats-cluster-listen %s is not a loopback address and neither --nats-cluster-password-file nor --nats-cluster-tls-* is set: anyone reaching it could join the cluster and read every stream (or set --insecure-allow-unauthenticated)", ErrInvalidOptions, o.Listen))
		}
	}
	if o.routeTLS() {
		for flag, f := range map[string]string{"--nats-cluster-tls-cert-file": o.TLSCertFile, "--nats-cluster-tls-key-file": o.TLSKeyFile, "--nats-cluster-tls-ca-file": o.TLSCAFile} {
			if f == "" {
				errs = append(errs, fmt.Errorf("%w: %s is required with the other --nats-cluster-tls-* flags (routes verify each other both ways)", ErrInvalidOptions, flag))
			} else if _, err := os.Stat(f); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, flag, err))
			}
		}
	}
	if _, err := o.config().ParseRoutes(); err != nil {
		errs = append(errs, fmt.Errorf("%w: --nats-routes: %w", ErrInvalidOptions, err))
	}
	if o.PasswordFile != "" {
		if _, err := os.Stat(o.PasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("%w: --nats-cluster-password-file: %v", ErrInvalidOptions, err))
		}
	}
	return errs
}

// members is the most servers the routes name, this one counted once.
func (o *NATSClusterOptions) members() int { return o.config().Members() }
