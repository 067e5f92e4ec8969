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
	// Token, when set, is required from clients.
	Token string
}

// Server is a running embedded server.
type Server struct {
	ns *server.Server
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
	sopts := &server.Options{
		ServerName:         o.ServerName,
		Host:               o.Host,
		Port:               o.Port,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		MaxPayload:         stream.MaxPayload,
		NoSigs:             true,
		Authorization:      o.Token,
		JetStreamMaxMemory: 256 << 20,
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
	return &Server{ns: ns}, nil
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
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
