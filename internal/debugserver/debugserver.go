package debugserver

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/fleetview/fleetview/internal/connlimit"
)

// Server is a running debug endpoint.
type Server struct {
	srv *http.Server
	l   net.Listener
}

// Options say what the endpoint serves besides /metrics, and its bounds.
type Options struct {
	// Pprof serves Go profiles at /debug/pprof/. Off when the endpoint is
	// exposed for scraping (a ServiceMonitor): profiles and goroutine dumps
	// say more than metrics, and a CPU profile costs the process.
	Pprof bool
	// Timeouts bound each connection; zero fields take the defaults
	// (Default*Timeout).
	Timeouts Timeouts
	// Connections caps the connections; zero fields take
	// DefaultConnections'. Its own caps, not the API's: a flood of API
	// connections must not blind the scrape that would show it.
	Connections connlimit.Limits
}

// Timeouts of the endpoint's HTTP server (http.Server's fields of the
// same names; Write is renewed per write, connlimit.Deadlines).
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// Defaults: a profile or trace may last up to the write timeout (pprof
// refuses a longer one by itself); a few scrapers and an operator need
// few connections.
const (
	DefaultReadHeaderTimeout       = 10 * time.Second
	DefaultReadTimeout             = 30 * time.Second
	DefaultWriteTimeout            = time.Minute
	DefaultIdleTimeout             = 2 * time.Minute
	DefaultMaxConnections          = 128
	DefaultMaxConnectionsPerClient = 32
)

// Start listens on addr and serves metrics at /metrics and, with
// o.Pprof, profiles at /debug/pprof/ until Close.
func Start(addr string, metrics http.Handler, o Options) (*Server, error) {
	t, c := o.Timeouts, o.Connections
	t.ReadHeader, t.Read, t.Write, t.Idle = or(t.ReadHeader, DefaultReadHeaderTimeout), or(t.Read, DefaultReadTimeout),
		or(t.Write, DefaultWriteTimeout), or(t.Idle, DefaultIdleTimeout)
	if c.Max <= 0 {
		c.Max = DefaultMaxConnections
	}
	if c.PerClient <= 0 {
		c.PerClient = DefaultMaxConnectionsPerClient
	}
	lim := connlimit.New(c)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s := &Server{srv: &http.Server{Handler: lim.Refuse(connlimit.Deadlines(t.Write, mux), nil),
		ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}, l: l}
	go func() { _ = s.srv.Serve(lim.Listen(l)) }()
	return s, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Addr is the address it listens on.
func (s *Server) Addr() string { return s.l.Addr().String() }

// Close stops it; a nil Server (metrics off) closes as a no-op.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	return s.srv.Close()
}
