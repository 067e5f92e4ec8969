package debugserver

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server is a running debug endpoint.
type Server struct {
	srv *http.Server
	l   net.Listener
}

// Options say what the endpoint serves besides /metrics.
type Options struct {
	// Pprof serves Go profiles at /debug/pprof/. Off when the endpoint is
	// exposed for scraping (a ServiceMonitor): profiles and goroutine dumps
	// say more than metrics, and a CPU profile costs the process.
	Pprof bool
}

// Start listens on addr and serves metrics at /metrics and, with
// o.Pprof, profiles at /debug/pprof/ until Close.
func Start(addr string, metrics http.Handler, o Options) (*Server, error) {
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
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, l: l}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
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
