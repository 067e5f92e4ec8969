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

// Start listens on addr and serves metrics at /metrics and profiles at
// /debug/pprof/ until Close.
func Start(addr string, metrics http.Handler) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
