package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

// result is everything the run measured.
type result struct {
	cfg                  config
	clusters             []string
	ingest, mirrorBuilt  time.Duration
	lists                []listTimes
	changes              *changeTimes
	restartReady         time.Duration
	restartRebuilt       time.Duration
	rssMB                float64
	heap                 heapUse
	rbacObjects          map[string]int // per resource, across the members
	loadBefore, loadDone string
}

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
	benchutil.Logf("each member: %d namespaces with a RoleBinding each, %d Pods (%d where alice is not granted); in %s",
		cfg.namespaces, cfg.pods+cfg.hidden, cfg.hidden, took.Round(time.Second))

	dir, bin, kubeconfig, err := benchutil.Workdir(ctx, fleet, "fv-bench-memberrbac-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h, err := newHub(dir, bin)
	if err != nil {
		return err
	}
	if err := h.start(ctx); err != nil {
		return err
	}
	defer func() { _ = h.stop() }()
	cols, err := startCollectors(dir, bin, kubeconfig, h.natsURL, r.clusters)
	if err != nil {
		return err
	}
	defer cols.stop()

	aliceWant, allWant := expected(cfg, r.clusters)
	t0 := time.Now()
	if err := applyRegistry(ctx, h.rest); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Minute, "every Pod cached", count(ctx, h.rest+"/api/v1/pods?limit=1", "root-token", len(allWant))); err != nil {
		return err
	}
	r.ingest = time.Since(t0)
	if err := waitFor(ctx, 10*time.Minute, "alice's view complete", count(ctx, h.rest+"/api/v1/pods?limit=1", "alice-token", len(aliceWant))); err != nil {
		return err
	}
	r.mirrorBuilt = time.Since(t0)
	benchutil.Logf("every Pod cached %s after the registry apply; alice's view complete after %s", r.ingest.Round(time.Millisecond), r.mirrorBuilt.Round(time.Millisecond))

	callers := []caller{{restricted, "alice-token", aliceWant}, {unrestricted, "bob-token", allWant}, {"root", "root-token", allWant}}
	if r.lists, err = measureLists(ctx, cfg, h.rest, h.pid(), callers); err != nil {
		return err
	}
	if cfg.profileDir != "" {
		for i, p := range listPaths {
			for _, c := range callers[:2] {
				if err := cpuProfile(ctx, h, filepath.Join(cfg.profileDir, fmt.Sprintf("list%d-%s.cpu.pprof", i, c.user)), p, c.token); err != nil {
					return err
				}
			}
		}
	}
	if r.changes, err = measureChanges(ctx, cfg, h.rest, fleet); err != nil {
		return err
	}
	r.rssMB = benchutil.ProcMB(h.pid(), "VmRSS:")

	// A restart: every member's authorizer is built again from the cache.
	if err := h.stop(); err != nil {
		return err
	}
	if err := h.start(ctx); err != nil {
		return err
	}
	r.restartReady = time.Since(h.startedAt)
	if err := waitFor(ctx, 10*time.Minute, "alice's view complete after a restart", count(ctx, h.rest+"/api/v1/pods?limit=1", "alice-token", len(aliceWant))); err != nil {
		return err
	}
	r.restartRebuilt = time.Since(h.startedAt)
	if err := checkList(ctx, h.rest, listPaths[0], callers[0]); err != nil {
		return fmt.Errorf("after a restart: %w", err)
	}
	benchutil.Logf("restart: ready %s, alice's view complete %s", r.restartReady.Round(time.Millisecond), r.restartRebuilt.Round(time.Millisecond))

	// The mirror's memory, from a hub sampling every 512 bytes allocated.
	if err := h.stop(); err != nil {
		return err
	}
	if err := h.start(ctx, "GODEBUG=memprofilerate=512"); err != nil {
		return err
	}
	if err := waitFor(ctx, 10*time.Minute, "alice's view complete (heap profiling)", count(ctx, h.rest+"/api/v1/pods?limit=1", "alice-token", len(aliceWant))); err != nil {
		return err
	}
	if r.rbacObjects, err = rbacObjects(ctx, h.rest); err != nil {
		return err
	}
	if r.heap, err = mirrorHeap(ctx, h.metrics); err != nil {
		return err
	}
	r.loadDone = benchutil.Loadavg()
	printResult(os.Stdout, r)
	return nil
}

// count is nil once the list at url (limit=1) counts want objects.
func count(ctx context.Context, url, token string, want int) func() error {
	return func() error {
		n, err := listCount(ctx, url, token)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%d objects, want %d", n, want)
		}
		return nil
	}
}

// listCount is the objects a Kubernetes API list counts, read as the
// token's user.
func listCount(ctx context.Context, url, token string) (int, error) {
	return benchutil.ListCount(ctx, func(ctx context.Context, url string) (int, []byte, error) { return get(ctx, url, token) }, url)
}

// rbacObjects counts the RBAC objects the hub caches (and mirrors), per
// resource, across the members.
func rbacObjects(ctx context.Context, rest string) (map[string]int, error) {
	out := map[string]int{}
	for _, res := range []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"} {
		n, err := listCount(ctx, rest+"/apis/rbac.authorization.k8s.io/v1/"+res+"?limit=1", "root-token")
		if err != nil {
			return nil, err
		}
		out[res] = n
	}
	return out, nil
}

// cpuProfile writes the hub's CPU profile over 10 s of token's list p,
// read again and again.
func cpuProfile(ctx context.Context, h *hub, path string, p listPath, token string) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			_, _ = listAll(pctx, h.rest, p, token, nil)
		}
	}()
	code, body, err := get(ctx, h.metrics+"/debug/pprof/profile?seconds=10", "")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("CPU profile: %d %.200s", code, body)
	}
	benchutil.Logf("CPU profile in %s", path)
	return os.WriteFile(path, body, 0o600)
}
