package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

// proc is one fleetview process the benchmark runs (the hub or a
// collector), with its /metrics and /debug/pprof address.
type proc struct {
	cmd     *exec.Cmd
	log     string
	metrics string // http://host:port
	exited  chan struct{}
}

func startProc(bin, log, metricsAddr string, args ...string) (*proc, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: exec.Command(bin, append(args, "--metrics-addr", metricsAddr)...), log: log, metrics: "http://" + metricsAddr, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.exited) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive is nil while the process runs; after it exited, an error that
// ends a waitFor at once.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%w: the process exited (log %s)", benchutil.ErrStop, p.log)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to a minute for the process to exit.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
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
	code, body, err := get(ctx, p.metrics+"/metrics")
	if err != nil {
		return gauges{}, err
	}
	if code != http.StatusOK {
		return gauges{}, fmt.Errorf("GET %s/metrics: %d", p.metrics, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return gauges{}, fmt.Errorf("GET %s/metrics: %w", p.metrics, err)
	}
	g := gauges{single: map[string]float64{}}
	for name, f := range fams {
		if ms := f.GetMetric(); len(ms) == 1 && ms[0].GetGauge() != nil {
			g.single[name] = ms[0].GetGauge().GetValue()
		}
	}
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
	var addrs [4]string // gRPC, HTTP, NATS, metrics
	for i := range addrs {
		var err error
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	_, natsPort, err := net.SplitHostPort(addrs[2])
	if err != nil {
		return nil, err
	}
	p, err := startProc(bin, filepath.Join(dir, "hub.log"), addrs[3], "up", "--state-dir", filepath.Join(dir, "state"),
		"--grpc-addr", addrs[0], "--http-addr", addrs[1], "--nats-host", "127.0.0.1", "--nats-port", natsPort)
	if err != nil {
		return nil, err
	}
	h := &hub{proc: p, rest: "http://" + addrs[1], natsURL: "nats://" + addrs[2]}
	if err := waitFor(ctx, 5*time.Minute, "hub ready", func() error {
		if err := h.alive(); err != nil {
			return err
		}
		code, body, err := get(ctx, h.rest+"/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
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

// clustersSynced: /readyz/clusters says every one of n clusters synced.
func clustersSynced(ctx context.Context, rest string, n int) error {
	code, body, err := get(ctx, rest+"/readyz/clusters")
	if err != nil {
		return err
	}
	var st struct {
		Synced   bool   `json:"synced"`
		Reason   string `json:"reason"`
		Clusters []struct {
			Synced bool `json:"synced"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("/readyz/clusters %d: %w", code, err)
	}
	done := 0
	for _, c := range st.Clusters {
		if c.Synced {
			done++
		}
	}
	if code != http.StatusOK || !st.Synced || done != n {
		return fmt.Errorf("%d of %d clusters synced: %s", done, n, st.Reason)
	}
	return nil
}

// listCount is the objects a Kubernetes API list (limit=1) counts: its
// items and remainingItemCount.
func listCount(ctx context.Context, url string) (int, error) {
	code, body, err := get(ctx, url)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %.200s", url, code, body)
	}
	var l struct {
		Metadata struct {
			RemainingItemCount *int `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, err
	}
	n := len(l.Items)
	if l.Metadata.RemainingItemCount != nil {
		n += *l.Metadata.RemainingItemCount
	}
	return n, nil
}

// goroutines is the process's goroutine count, from its profile
// endpoint.
func (p *proc) goroutines(ctx context.Context) (int, error) {
	code, body, err := get(ctx, p.metrics+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(string(body), "goroutine profile: total %d", &n); code != http.StatusOK || err != nil {
		return 0, fmt.Errorf("goroutine profile: %d %v", code, err)
	}
	return n, nil
}

// liveHeapMB is the process's heap after a collection it forces (the
// heap profile's gc=1): what it holds, garbage aside, which RSS (pages
// the runtime has not returned yet) blurs at a small difference.
func (p *proc) liveHeapMB(ctx context.Context) (float64, error) {
	if code, _, err := get(ctx, p.metrics+"/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
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
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
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

func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitFor polls cond every 50 ms (benchutil.WaitFor).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	return benchutil.WaitFor(ctx, timeout, 50*time.Millisecond, what, cond)
}
