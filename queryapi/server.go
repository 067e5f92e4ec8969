package queryapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	regstore "github.com/fleetview/fleetview/internal/registry/store"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Config configures the API server.
type Config struct {
	Reader     Reader
	Registries *regstore.Store
	Inventory  jetstream.KeyValue
	JetStream  jetstream.JetStream
	// Applied reports the materializer's applied sequence per cluster.
	Applied func() map[string]uint64
	// GRPCListener and HTTPListener are owned by the server once Run starts.
	GRPCListener net.Listener
	HTTPListener net.Listener
	Logger       *slog.Logger
}

// Server serves gRPC and REST.
type Server struct {
	cfg  Config
	grpc *grpc.Server
	http *http.Server
}

// New wires the services.
func New(cfg Config) (*Server, error) {
	if cfg.Reader == nil || cfg.Registries == nil || cfg.Inventory == nil || cfg.JetStream == nil {
		return nil, errors.New("queryapi: Reader, Registries, Inventory and JetStream are required")
	}
	if cfg.GRPCListener == nil || cfg.HTTPListener == nil {
		return nil, errors.New("queryapi: both listeners are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	qs := &queryService{reader: cfg.Reader}
	cs := &clusterService{kv: cfg.Inventory, js: cfg.JetStream, applied: cfg.Applied}
	rs := &registryService{store: cfg.Registries}

	gs := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(256<<20))
	fleetviewv1.RegisterQueryServiceServer(gs, qs)
	fleetviewv1.RegisterClusterServiceServer(gs, cs)
	fleetviewv1.RegisterRegistryServiceServer(gs, rs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	gw := runtime.NewServeMux(runtime.WithErrorHandler(gatewayErrorHandler))
	ctx := context.Background()
	for _, reg := range []func() error{
		func() error { return fleetviewv1.RegisterQueryServiceHandlerServer(ctx, gw, qs) },
		func() error { return fleetviewv1.RegisterClusterServiceHandlerServer(ctx, gw, cs) },
		func() error { return fleetviewv1.RegisterRegistryServiceHandlerServer(ctx, gw, rs) },
	} {
		if err := reg(); err != nil {
			return nil, fmt.Errorf("queryapi: gateway: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/openapi.json", serveOpenAPI)
	return &Server{cfg: cfg, grpc: gs, http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Run serves until ctx ends, then stops accepting and drains in-flight calls.
func (s *Server) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.cfg.GRPCListener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.http.Serve(s.cfg.HTTPListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.http.Shutdown(sctx)
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			s.grpc.Stop()
		}
		return nil
	})
	return g.Wait()
}
