package natsserver

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/stream"
)

// Options configures the embedded server.
type Options struct {
	// StoreDir holds JetStream data; it survives restarts.
	StoreDir string
	// Host and Port to listen on; Port -1 picks a free port.
	Host string
	Port int
	// ServerName is stable across restarts so JetStream finds its state.
	ServerName string
	// Token, when set, is required from clients. It cannot be combined
	// with Clusters.
	Token string
	// Clusters, when set, gives each member cluster's collector its own
	// account and user, limited to its own stream and keys (see
	// accounts.go); the hub's components then connect as HubUser with
	// HubPassword.
	Clusters    []ClusterUser
	HubPassword string
	// TLS, when set, is required of every client connecting over the
	// network: plaintext clients are refused. Its GetCertificate serves
	// the certificate (internal/tlsfiles reloads a rotated one without a
	// restart); ClientAuth tls.RequireAndVerifyClientCert with ClientCAs
	// also requires client certificates (mTLS), on top of the token or
	// passwords. In-process connections (InProcess) need no TLS: they
	// never leave the process. Routes to the other members of a cluster
	// (Cluster) do not use it: Cluster.TLS secures them.
	TLS *tls.Config
	// Cluster, when its Name is set, makes the server a member of a
	// JetStream cluster: streams and buckets with more than one replica
	// then survive the loss of a member. ServerName must differ between
	// members.
	Cluster ClusterOptions
	// Quotas bound each member cluster's share of the hub with Clusters
	// (quota.go); zero fields take DefaultQuotas.
	Quotas Quotas
	// OnRefused, when set, is called for every request of a member
	// cluster's collector the guard refuses or drops, with one of the
	// Reason* constants (the hub counts them in a metric). It must not
	// block: the guard calls it in the cluster's request loop.
	OnRefused func(cluster, reason string)
}

// ClusterOptions make the server a member of a NATS cluster.
type ClusterOptions struct {
	// Name is shared by every member; JetStream forms its cluster (the
	// meta group electing stream leaders) among servers of one name.
	Name string
	// Host and Port the routes from other members connect to.
	Host string
	Port int
	// Routes are the nats://host:port route addresses of the members,
	// this one's included or not (a server skips the route to itself).
	// Routes are retried until the member answers, so members may start
	// in any order.
	Routes []*url.URL
	// Password, when set, is required of every route (user RouteUser):
	// without it anyone reaching the route port joins the cluster and
	// reads every stream.
	Password string
	// TLS, when set, encrypts every route and admits only members whose
	// certificate its CAs signed (tlsfiles.PeerConfig: a member serves
	// and dials with the same certificate, so it needs both server and
	// client certificates and CAs on both sides).
	TLS *tls.Config
}

// RouteUser is the user routes between members authenticate as.
const RouteUser = "fv_route"

// Server is a running embedded server.
type Server struct {
	ns *server.Server
	// guard checks the collectors' guarded requests (guard.go); nil
	// without per-cluster credentials.
	guard *guard
	// hubOpts are the hub's credentials (ConnectHub); tls says network
	// clients must speak TLS, so the hub's own connect in process.
	hubOpts []nats.Option
	tls     bool
}

// Start launches the server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("natsserver: StoreDir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = -1
	}
	if o.ServerName == "" {
		o.ServerName = "fleetview"
	}
	sopts := &server.Options{}
	o.Quotas = o.Quotas.withDefaults()
	if len(o.Clusters) > 0 {
		if o.Token != "" {
			return nil, fmt.Errorf("%w: a token and per-cluster users cannot be combined", ErrInvalidCredentials)
		}
		if err := o.Quotas.Validate(); err != nil {
			return nil, err
		}
		conf, err := accountsConfig(o.HubPassword, o.Clusters, o.Quotas)
		if err != nil {
			return nil, err
		}
		if err := sopts.ProcessConfigString(conf); err != nil {
			return nil, fmt.Errorf("natsserver: accounts: %w", err)
		}
	}
	sopts.ServerName = o.ServerName
	sopts.Host = o.Host
	sopts.Port = o.Port
	sopts.JetStream = true
	sopts.StoreDir = o.StoreDir
	sopts.MaxPayload = stream.MaxPayload
	sopts.NoSigs = true
	sopts.Authorization = o.Token
	sopts.JetStreamMaxMemory = 256 << 20
	// Every account's sublist caches the last 1,024 subjects it matched.
	// Ours are unique per object (fv.obj.<cluster>.<resource>.<uid>) and
	// per acknowledgement ($JS.ACK...), so the caches hold subjects that
	// are not published again: memory in each cluster's account, for no
	// hits (measured: docs/benchmarks/fleet.md#2000-clusters-x-500-pods-after-the-per-cluster-fixes-2026-12-05).
	sopts.NoSublistCache = true
	if o.Cluster.Name != "" {
		if err := clusterOptions(sopts, o.Cluster); err != nil {
			return nil, err
		}
	}
	if o.TLS != nil {
		if o.TLS.GetCertificate == nil && len(o.TLS.Certificates) == 0 {
			return nil, fmt.Errorf("%w: a TLS configuration without a certificate", ErrInvalidTLS)
		}
		if o.TLS.ClientAuth == tls.RequireAndVerifyClientCert && o.TLS.ClientCAs == nil {
			return nil, fmt.Errorf("%w: client certificates required without client CAs", ErrInvalidTLS)
		}
		sopts.TLS, sopts.TLSConfig = true, o.TLS
		// TLSVerify is what the server's INFO tells clients about client
		// certificates; the handshake itself enforces ClientAuth.
		sopts.TLSVerify = o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		sopts.TLSTimeout = tlsTimeout.Seconds()
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, ErrNotReady
	}
	srv := &Server{ns: ns, hubOpts: o.hubClientOptions(), tls: o.TLS != nil}
	if len(o.Clusters) > 0 {
		if srv.guard, err = startGuard(ns, o.HubPassword, o.Clusters, o.Quotas, o.OnRefused); err != nil {
			ns.Shutdown()
			return nil, err
		}
	}
	return srv, nil
}

// clusterOptions sets the server's cluster membership: its route listener
// and the routes to the others, with the route password in each route's
// URL (the server sends a route URL's user information when it connects).
func clusterOptions(sopts *server.Options, c ClusterOptions) error {
	if len(c.Routes) == 0 {
		return fmt.Errorf("%w: a cluster member without routes", ErrInvalidCluster)
	}
	if strings.ContainsAny(c.Name, " \t.*>") {
		return fmt.Errorf("%w: cluster name %q", ErrInvalidCluster, c.Name)
	}
	sopts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
	if t := c.TLS; t != nil {
		switch {
		case t.GetCertificate == nil && len(t.Certificates) == 0, t.GetClientCertificate == nil && len(t.Certificates) == 0:
			return fmt.Errorf("%w: route TLS without a certificate to serve and dial with", ErrInvalidTLS)
		case t.RootCAs == nil || t.ClientCAs == nil || t.ClientAuth != tls.RequireAndVerifyClientCert:
			return fmt.Errorf("%w: route TLS must verify the peer both ways (CAs for servers and clients, client certificates required)", ErrInvalidTLS)
		}
		sopts.Cluster.TLSConfig, sopts.Cluster.TLSTimeout = t, tlsTimeout.Seconds()
	}
	if c.Password != "" {
		sopts.Cluster.Username, sopts.Cluster.Password = RouteUser, c.Password
	}
	for _, r := range c.Routes {
		u := *r
		if c.Password != "" {
			u.User = url.UserPassword(RouteUser, c.Password)
		}
		sopts.Routes = append(sopts.Routes, &u)
	}
	return nil
}

// tlsTimeout bounds a client's TLS handshake. The server's default (2s)
// is short for collectors of member clusters far from the hub on a loaded
// link; a handshake is a few round trips.
const tlsTimeout = 5 * time.Second

// ConnectInProcess connects a client in this process to the server
// without the network (net.Pipe). The hub's own components use it when
// network clients must speak TLS: no byte of it leaves the process, and
// they would otherwise need a certificate valid for a loopback address.
func (s *Server) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	// The URL only names the connection: with a nats:// scheme the client
	// does not ask for TLS, which the server does not require in process.
	return nats.Connect("nats://in-process", append(opts, nats.InProcessServer(s.ns))...)
}

// ClientURL is the nats:// (tls:// with TLS) URL clients in this process connect to; a server
// listening on every address is reached on loopback.
func (s *Server) ClientURL() string {
	u := s.ns.ClientURL()
	for _, any := range []string{"//0.0.0.0:", "//[::]:"} {
		u = strings.Replace(u, any, "//127.0.0.1:", 1)
	}
	return u
}

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	if s.guard != nil {
		s.guard.close()
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// StoreBytes is JetStream's file storage on this server: what every
// stream's byte quota is reserved against (nats-server takes most of the
// free disk under StoreDir when no limit is configured). 0 when JetStream
// is not running.
func (s *Server) StoreBytes() int64 {
	if c := s.ns.JetStreamConfig(); c != nil {
		return c.MaxStore
	}
	return 0
}

// NumRoutes is how many routes to other cluster members are up.
func (s *Server) NumRoutes() int { return s.ns.NumRoutes() }

// SubscriptionChanges is how many times the subscriptions of account
// changed (each insert and each removal) since the server started: what
// empties the server's per-connection cache of routed subjects.
func (s *Server) SubscriptionChanges(account string) (uint64, error) {
	z, err := s.ns.Accountz(&server.AccountzOptions{Account: account})
	if err != nil {
		return 0, err
	}
	if z.Account == nil || z.Account.Sublist == nil {
		return 0, fmt.Errorf("account %q: no subscription statistics", account)
	}
	return z.Account.Sublist.NumInserts + z.Account.Sublist.NumRemoves, nil
}
