package natsserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

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
}

// Server is a running embedded server.
type Server struct {
	ns *server.Server
	// guard checks the collectors' guarded requests (guard.go); nil
	// without per-cluster credentials.
	guard *guard
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
	if len(o.Clusters) > 0 {
		if o.Token != "" {
			return nil, fmt.Errorf("%w: a token and per-cluster users cannot be combined", ErrInvalidCredentials)
		}
		conf, err := accountsConfig(o.HubPassword, o.Clusters)
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
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, ErrNotReady
	}
	srv := &Server{ns: ns}
	if len(o.Clusters) > 0 {
		if srv.guard, err = startGuard(ns, o.HubPassword, o.Clusters); err != nil {
			ns.Shutdown()
			return nil, err
		}
	}
	return srv, nil
}

// ClientURL is the nats:// URL clients in this process connect to; a server
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
