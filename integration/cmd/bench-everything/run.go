package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

// member is what one member's collector and apiserver hold at a moment.
type member struct {
	goroutines         int
	rssMB, peakMB      float64
	resources, objects int
	watches            int     // the member apiserver's WATCH requests
	conns              int     // the collector's TCP connections to it
	heapMB             float64 // the collector's live heap, after a collection
}

// snapshot is the hub and every member at a moment.
type snapshot struct {
	hubRSSMB, hubPeakMB float64
	hubGoroutines       int
	members             []member
}

// phase is one registry's run on a fresh hub and fresh collectors.
type phase struct {
	label       string
	idle, after snapshot // before the registry (collectors connected), and synced + settled
	synced      time.Duration
	lateCRD     time.Duration // everything only: a CRD installed until its object is listed
}

type result struct {
	cfg                  config
	clusters             []string
	baseline, everything *phase
	loadBefore, loadDone string
}

// The two registries: the baseline names Pods; everything is one wildcard.
var (
	podsOnly   = []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	everything = []any{map[string]any{"apiVersion": "*", "kind": "*"}}
)

func run(ctx context.Context, cfg config) error {
	r := &result{cfg: cfg, loadBefore: benchutil.Loadavg()}
	for i := range cfg.clusters {
		r.clusters = append(r.clusters, fmt.Sprintf("member%d", i+1))
	}
	fleet, took, err := benchutil.StartFleet(ctx, r.clusters, func(ctx context.Context, c *harness.Cluster) error { return populate(ctx, c, cfg) })
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Stop() }()
	benchutil.Logf("each member: %d CRDs x %d objects, %d Pods; in %s", cfg.crds, cfg.objects, cfg.pods, took.Round(time.Second))

	dir, bin, kubeconfig, err := benchutil.Workdir(ctx, fleet, "fv-bench-everything-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if r.baseline, err = runPhase(ctx, cfg, fleet, bin, kubeconfig, filepath.Join(dir, "pods"), "Pods only", podsOnly); err != nil {
		return err
	}
	if r.everything, err = runPhase(ctx, cfg, fleet, bin, kubeconfig, filepath.Join(dir, "everything"), "everything", everything); err != nil {
		return err
	}
	r.loadDone = benchutil.Loadavg()
	printResult(os.Stdout, r)
	return nil
}

// runPhase starts a hub and the collectors in dir, applies the registry
// sels, and measures until the hub has synced it (and, for a wildcard, a
// CRD installed afterwards).
func runPhase(ctx context.Context, cfg config, fleet *harness.Fleet, bin, kubeconfig, dir, label string, sels []any) (*phase, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &phase{label: label}
	benchutil.Logf("%s: starting the hub and %d collectors", label, cfg.clusters)
	h, err := startHub(ctx, dir, bin)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	var cols []*proc
	defer func() {
		for _, c := range cols {
			c.stop()
		}
	}()
	for _, cl := range fleet.Clusters() {
		c, err := startCollector(ctx, dir, bin, kubeconfig, h.natsURL, cl.Name)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	time.Sleep(2 * time.Second) // the collectors' NATS connections and first reads settle
	if p.idle, err = measure(ctx, h, cols, fleet); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := benchutil.ApplyRegistry(ctx, h.rest, "", "bench", sels); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 60*time.Minute, label+": every cluster synced", func() error {
		if err := h.alive(); err != nil {
			return err
		}
		return benchutil.ClustersSynced(ctx, h.rest, cfg.clusters)
	}); err != nil {
		return nil, err
	}
	p.synced = time.Since(t0)
	benchutil.Logf("%s: /readyz/clusters 200 %s after the registry apply", label, p.synced.Round(time.Millisecond))
	if err := check(ctx, cfg, h.rest, len(sels) == 1 && sels[0].(map[string]any)["kind"] == "*"); err != nil {
		return nil, fmt.Errorf("%s: synced, but %w", label, err)
	}
	time.Sleep(cfg.settle)
	if p.after, err = measure(ctx, h, cols, fleet); err != nil {
		return nil, err
	}
	if cfg.profileDir != "" {
		// Where the hub's memory goes, in each phase: the difference is
		// what the wildcard's kinds and objects hold.
		code, body, err := benchutil.Get(ctx, h.metrics+"/debug/pprof/heap")
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("hub heap profile: %d %v", code, err)
		}
		path := filepath.Join(cfg.profileDir, strings.ReplaceAll(label, " ", "-")+"-hub.heap.pprof")
		if err := os.WriteFile(path, body, 0o600); err != nil {
			return nil, err
		}
		benchutil.Logf("%s: the hub's heap profile in %s", label, path)
	}
	if label == "everything" {
		cl := fleet.Clusters()[0]
		t0 := time.Now()
		if err := lateCRD.install(ctx, cl); err != nil {
			return nil, err
		}
		if _, err := cl.Dynamic().Resource(lateCRD.gvr()).Namespace(namespace).Create(ctx, lateCRD.object(0), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		url := fmt.Sprintf("%s/apis/%s/v1/%s?limit=1", h.rest, lateCRD.group, lateCRD.plural)
		if err := waitFor(ctx, 2*time.Minute, "the late CRD's object listed through the hub", func() error {
			n, err := benchutil.ListCount(ctx, benchutil.Get, url)
			if err == nil && n != 1 {
				err = fmt.Errorf("%d objects, want 1", n)
			}
			return err
		}); err != nil {
			return nil, err
		}
		p.lateCRD = time.Since(t0)
		benchutil.Logf("a CRD installed in %s: its object listed through the hub %s after the CRD's create", cl.Name, p.lateCRD.Round(time.Millisecond))
	}
	return p, nil
}

// check is nil when the hub lists every Pod of every member and, when
// all, every object of every fixture CRD.
func check(ctx context.Context, cfg config, rest string, all bool) error {
	urls := map[string]int{rest + "/api/v1/pods?limit=1": cfg.clusters * cfg.pods}
	if all {
		for i := range cfg.crds {
			c := fixtureCRD(i)
			urls[fmt.Sprintf("%s/apis/%s/v1/%s?limit=1", rest, c.group, c.plural)] = cfg.clusters * cfg.objects
		}
	}
	for url, want := range urls {
		n, err := benchutil.ListCount(ctx, benchutil.Get, url)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("GET %s: %d objects, want %d", url, n, want)
		}
	}
	return nil
}

func measure(ctx context.Context, h *hub, cols []*proc, fleet *harness.Fleet) (snapshot, error) {
	s := snapshot{hubRSSMB: benchutil.ProcMB(h.Pid(), "VmRSS:"), hubPeakMB: benchutil.ProcMB(h.Pid(), "VmHWM:")}
	var err error
	if s.hubGoroutines, err = h.goroutines(ctx); err != nil {
		return s, err
	}
	for i, cl := range fleet.Clusters() {
		c := cols[i]
		g, err := c.gauges(ctx)
		if err != nil {
			return s, err
		}
		m := member{goroutines: int(g.single["go_goroutines"]), rssMB: benchutil.ProcMB(c.Pid(), "VmRSS:"), peakMB: benchutil.ProcMB(c.Pid(), "VmHWM:"),
			resources: g.resources, objects: g.objects}
		if m.heapMB, err = c.liveHeapMB(ctx); err != nil {
			return s, err
		}
		if m.watches, err = apiserverWatches(ctx, cl); err != nil {
			return s, err
		}
		port, err := hostPort(cl.AdminRESTConfig().Host)
		if err != nil {
			return s, err
		}
		if m.conns, err = tcpConnsTo(c.Pid(), port); err != nil {
			return s, err
		}
		s.members = append(s.members, m)
	}
	return s, nil
}
