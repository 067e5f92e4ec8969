package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/badger"
	"github.com/fleetview/fleetview/queryapi"
)

// ServeOptions run the materializer (Badger) and the query API against a
// NATS server; `up` adds an embedded NATS server and in-process collectors.
type ServeOptions struct {
	StateDir string
	GRPCAddr string
	HTTPAddr string
	NATSURL  string
}

// AddFlags registers the flags.
func (o *ServeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "fleetview-state", "directory for the Badger cache (and, for up, the embedded NATS store)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", "127.0.0.1:7070", "gRPC listen address")
	fs.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:8080", "REST (grpc-gateway) listen address")
	fs.StringVar(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
}

// Validate reports every problem at once.
func (o *ServeOptions) Validate() []error {
	var errs []error
	if o.StateDir == "" {
		errs = append(errs, fmt.Errorf("%w: --state-dir is required", ErrInvalidOptions))
	}
	for name, a := range map[string]string{"--grpc-addr": o.GRPCAddr, "--http-addr": o.HTTPAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %q: %v", ErrInvalidOptions, name, a, err))
		}
	}
	return errs
}

// backend is the materializer + Badger + query API stack.
type backend struct {
	store *badger.Store
	mat   *materializer.Materializer
	api   *queryapi.Server
}

func newBackend(ctx context.Context, o ServeOptions, nc *nats.Conn, log *slog.Logger) (*backend, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	regs, err := regstore.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	inv, err := inventory.Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	store, err := badger.Open(badger.Options{Dir: filepath.Join(o.StateDir, "badger"), Logger: log})
	if err != nil {
		return nil, err
	}
	hub := queryapi.NewHub(queryapi.HubOptions{})
	mat, err := materializer.New(materializer.Config{Name: "badger", NATS: nc, Sink: store, Observer: hub.Observe, Logger: log})
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	gl, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("listen %s: %w", o.GRPCAddr, err)
	}
	hl, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		_ = store.Close()
		return nil, fmt.Errorf("listen %s: %w", o.HTTPAddr, err)
	}
	api, err := queryapi.New(queryapi.Config{
		Reader: store.Reader(badger.ReaderOptions{}), Hub: hub, Registries: regs, Inventory: inv, JetStream: js, Applied: mat.Applied,
		GRPCListener: gl, HTTPListener: hl, Logger: log,
	})
	if err != nil {
		_ = gl.Close()
		_ = hl.Close()
		_ = store.Close()
		return nil, err
	}
	log.Info("query API listening", "grpc", gl.Addr().String(), "http", "http://"+hl.Addr().String())
	return &backend{store: store, mat: mat, api: api}, nil
}

// run drains the materializer and the API, then closes Badger.
func (b *backend) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.mat.Run(gctx) })
	g.Go(func() error { return b.api.Run(gctx) })
	err := g.Wait()
	if cerr := b.store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// RunServe runs the materializer and query API until ctx ends.
func RunServe(ctx context.Context, o ServeOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	nc, err := nats.Connect(o.NATSURL, nats.Name("fleetview-serve"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	b, err := newBackend(ctx, o, nc, log)
	if err != nil {
		return err
	}
	return b.run(ctx)
}

// UpOptions run everything in one process.
type UpOptions struct {
	ServeOptions
	Kubeconfig string
	Contexts   []string
	NATSPort   int
}

// AddFlags registers the flags.
func (o *UpOptions) AddFlags(fs *pflag.FlagSet) {
	o.ServeOptions.AddFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig holding the member clusters' contexts")
	fs.StringSliceVar(&o.Contexts, "context", nil, "kubeconfig context of a member cluster (repeatable); the member cluster is named after it")
	fs.IntVar(&o.NATSPort, "nats-port", 4222, "port of the embedded NATS server (-1 = any free port)")
}

// Validate reports every problem at once.
func (o *UpOptions) Validate() []error {
	errs := o.ServeOptions.Validate()
	if len(o.Contexts) == 0 {
		errs = append(errs, fmt.Errorf("%w: at least one --context is required", ErrInvalidOptions))
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

// RunUp runs an embedded NATS server, the Badger backend, the query API and
// one collector per context, until ctx ends. Shutdown: collectors stop and
// flush, the materializer drains and Badger closes, then NATS stops.
func RunUp(ctx context.Context, o UpOptions, log *slog.Logger) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	collectors := make([]collector.Config, 0, len(o.Contexts))
	for _, c := range o.Contexts {
		rc, err := restConfig(o.Kubeconfig, c)
		if err != nil {
			return err
		}
		collectors = append(collectors, collector.Config{Cluster: c, REST: rc, Logger: log})
	}
	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(o.StateDir, "nats"), Port: o.NATSPort})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	log.Info("embedded NATS running", "url", ns.ClientURL())
	nc, err := nats.Connect(ns.ClientURL(), nats.Name("fleetview-up"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	o.NATSURL = ns.ClientURL()
	b, err := newBackend(ctx, o.ServeOptions, nc, log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	cctx, stopCollectors := context.WithCancel(gctx)
	defer stopCollectors()
	var cg errgroup.Group
	for _, cfg := range collectors {
		cfg.NATS = nc
		col, err := collector.New(cfg)
		if err != nil {
			stopCollectors()
			return err
		}
		cg.Go(func() error { return col.Run(cctx) })
	}
	g.Go(func() error {
		err := cg.Wait()
		if err != nil && gctx.Err() == nil {
			return err
		}
		return nil
	})
	g.Go(func() error { return b.run(gctx) })
	return g.Wait()
}
