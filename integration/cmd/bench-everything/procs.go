package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

// proc is one fleetview process the benchmark runs (the hub or a
// collector), with its /metrics and /debug/pprof address.
type proc struct {
	*benchutil.Proc
	metrics string // http://host:port
}

func startProc(bin, log, metricsAddr string, args ...string) (*proc, error) {
	p, err := benchutil.StartProc(bin, log, nil, append(args, "--metrics-addr", metricsAddr)...)
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p, metrics: "http://" + metricsAddr}, nil
}

// alive is nil while the process runs; after it exited, an error that
// ends a waitFor at once.
func (p *proc) alive() error { return p.Alive("process") }

// stop sends SIGTERM and waits up to a minute for the process to exit.
func (p *proc) stop() {
	if p != nil {
		_ = p.Stop(time.Minute)
	}
}

// gauges are the single-series gauges of the process's /metrics, and the
// series of fleetview_collector_objects (one per resource and namespace a
// collector syncs).
type gauges struct {
	single            map[string]float64
	resources         int
	objects, unsynced int
}

func (p *proc) gauges(ctx context.Context) (gauges, error) {
	fams, err := benchutil.MetricFamilies(ctx, p.metrics)
	if err != nil {
		return gauges{}, err
	}
	g := gauges{single: benchutil.SingleGauges(fams)}
	for _, m := range fams["fleetview_collector_objects"].GetMetric() {
		g.resources++
		g.objects += int(m.GetGauge().GetValue())
	}
	return g, nil
}

// hub is one `fleetview up` process (no authentication: the benchmark
// reads as an anonymous user on loopback).
type hub struct {
	*proc
	rest, natsURL string
}

func startHub(ctx context.Context, dir, bin string) (*hub, error) {
	a, err := benchutil.NewHubAddrs()
	if err != nil {
		return nil, err
	}
	p, err := startProc(bin, filepath.Join(dir, "hub.log"), a.Metrics, "up", "--state-dir", filepath.Join(dir, "state"),
		"--grpc-addr", a.GRPC, "--http-addr", a.HTTP, "--nats-host", "127.0.0.1", "--nats-port", a.NATSPort)
	if err != nil {
		return nil, err
	}
	h := &hub{proc: p, rest: "http://" + a.HTTP, natsURL: "nats://" + a.NATS}
	if err := waitFor(ctx, 5*time.Minute, "hub ready", func() error {
		if err := h.alive(); err != nil {
			return err
		}
		return benchutil.Ready(ctx, h.rest)
	}); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// startCollector runs `fleetview collector` for cluster and waits for
// its /metrics to answer.
func startCollector(ctx context.Context, dir, bin, kubeconfig, natsURL, cluster string) (*proc, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startProc(bin, filepath.Join(dir, "collector-"+cluster+".log"), addr,
		"collector", "--cluster", cluster, "--kubeconfig", kubeconfig, "--context", cluster, "--nats-url", natsURL)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 2*time.Minute, cluster+"'s collector serving /metrics", func() error {
		if err := p.alive(); err != nil {
			return err
		}
		_, err := p.gauges(ctx)
		return err
	}); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// goroutines is the process's goroutine count, from its profile
// endpoint.
func (p *proc) goroutines(ctx context.Context) (int, error) {
	return benchutil.Goroutines(ctx, p.metrics)
}

// liveHeapMB is the process's heap after a collection it forces (the
// heap profile's gc=1): what it holds, garbage aside, which RSS (pages
// the runtime has not returned yet) blurs at a small difference.
func (p *proc) liveHeapMB(ctx context.Context) (float64, error) {
	if code, _, err := benchutil.Get(ctx, p.metrics+"/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("heap profile of %s: %d %v", p.metrics, code, err)
	}
	g, err := p.gauges(ctx)
	return g.single["go_memstats_heap_alloc_bytes"] / (1 << 20), err
}

// apiserverWatches is the WATCH requests the member's apiserver is serving
// now (apiserver_longrunning_requests, summed over its resources).
func apiserverWatches(ctx context.Context, cl *harness.Cluster) (int, error) {
	body, err := cl.Clientset().Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: GET /metrics: %w", cl.Name, err)
	}
	fams, err := benchutil.ParseMetrics(body)
	if err != nil {
		return 0, fmt.Errorf("%s: /metrics: %w", cl.Name, err)
	}
	n := 0
	for _, m := range fams["apiserver_longrunning_requests"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" && l.GetValue() == "WATCH" {
				n += int(m.GetGauge().GetValue())
			}
		}
	}
	return n, nil
}

// waitFor polls cond every 50 ms (benchutil.WaitFor).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	return benchutil.WaitFor(ctx, timeout, 50*time.Millisecond, what, cond)
}
