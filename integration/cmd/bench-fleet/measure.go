package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
)

// result is what one hub measured.
type result struct {
	spec                   hubSpec
	sync                   time.Duration
	rssSteadyMB, rssPeakMB float64
	// rssAnonMB and rssFileMB split the steady RSS: the process's own
	// memory, and the pages of files it maps (Badger's tables and value
	// log), which the kernel reclaims under pressure.
	rssAnonMB, rssFileMB float64
	// rssBusyMB is the RSS right after the registry change, beside
	// rssSteadyMB, the RSS after cfg.quiet with no change.
	rssBusyMB            float64
	getP50, getP99, list time.Duration
	// getRestP50 and getRestP99 are the same Gets after cfg.quiet.
	getRestP50, getRestP99      time.Duration
	kubectl                     time.Duration
	kubectlRows                 int
	listRVBytes, eventBytes     int
	eventRVBytes                int
	registryChange              time.Duration
	restartReady, restartSynced time.Duration
	goroutines                  int
	// goMem is the Go runtime's part of the steady RSS (MB): heap in use,
	// goroutine stacks, and the heap size the next GC is due at.
	goMem goMemMB
	// cgroupPeakMB is the peak of the hub's memory cgroup
	// (FV_FLEET_HUB_MEMORY), page cache included.
	cgroupPeakMB float64
	// syncCPU is the CPU time used during the sync by the hub, by the
	// simulator's collectors and by the kube-apiservers and etcds: on
	// shared cores, which of them the sync waited for.
	syncCPU [3]time.Duration
	// registryCPU is the same split over the registry change: a
	// simulator starved of CPU delays the collectors' status writes the
	// change is timed by.
	registryCPU [3]time.Duration
	// statusWrites is when the collectors' status reports of the
	// registry change were stored, after it was applied: p50, p90, last.
	statusWrites [3]time.Duration
}

func measure(ctx context.Context, cfg config, dir, bin, kubeconfig string, fleet *harness.Fleet, spec hubSpec) (*result, error) {
	benchutil.Logf("%s: starting the hub", spec.label)
	if err := os.MkdirAll(filepath.Join(dir, "users"), 0o700); err != nil {
		return nil, err
	}
	var users strings.Builder
	for _, c := range spec.clusters {
		line := c + ":" + c + "-secret-0123456789\n"
		users.WriteString(line)
		if err := os.WriteFile(filepath.Join(dir, "users", c), []byte(line), 0o600); err != nil {
			return nil, err
		}
	}
	usersFile, hubPass := filepath.Join(dir, "nats-users"), filepath.Join(dir, "hub-pass")
	if err := os.WriteFile(usersFile, []byte(users.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(hubPass, []byte(benchHubPassword), 0o600); err != nil {
		return nil, err
	}
	a, err := benchutil.NewHubAddrs()
	if err != nil {
		return nil, err
	}
	grpcAddr, httpAddr, natsAddr, metricsAddr, natsPort := a.GRPC, a.HTTP, a.NATS, a.Metrics, a.NATSPort
	h := &hub{bin: bin, log: filepath.Join(dir, "hub.log"), rest: "http://" + httpAddr, args: []string{"up",
		"--state-dir", filepath.Join(dir, "state"), "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--nats-host", "127.0.0.1", "--nats-port", natsPort,
		"--nats-users-file", usersFile, "--nats-hub-password-file", hubPass}}
	h.args = append(h.args, "--metrics-addr", metricsAddr)
	metrics := "http://" + metricsAddr
	if cfg.hubMemory > 0 {
		name := fmt.Sprintf("fv-bench-fleet-%d-%s", os.Getpid(), spec.slug())
		if h.cgroup, err = benchutil.NewMemoryCgroup(name, cfg.hubMemory); err != nil {
			return nil, fmt.Errorf("FV_FLEET_HUB_MEMORY: %w", err)
		}
		defer func() { _ = os.Remove(h.cgroup) }()
	}
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = h.stop() }()
	ready := func() error { return benchutil.Ready(ctx, h.rest) }
	if err := waitFor(ctx, 5*time.Minute, "hub ready", ready); err != nil {
		return nil, fmt.Errorf("%w (log %s)", err, h.log)
	}
	if h.cgroup != "" {
		// The default --memory-limit (auto) must have read the cgroup.
		log, err := os.ReadFile(h.log)
		if err != nil {
			return nil, err
		}
		i := bytes.Index(log, []byte(`msg="Go memory limit set"`))
		if i < 0 {
			return nil, fmt.Errorf("the hub in a %d MiB cgroup set no Go memory limit (log %s)", cfg.hubMemory>>20, h.log)
		}
		line, _, _ := bytes.Cut(log[i:], []byte("\n"))
		benchutil.Logf("%s: %s", spec.label, line)
	}

	col := exec.CommandContext(ctx, os.Args[0], append([]string{"collectors", kubeconfig, filepath.Join(dir, "users"), "nats://" + natsAddr},
		pairs(spec.clusters, spec.contexts)...)...)
	colLog, err := os.Create(filepath.Join(dir, "collectors.log"))
	if err != nil {
		return nil, err
	}
	defer colLog.Close()
	col.Stdout, col.Stderr = colLog, colLog
	col.Cancel = func() error { return col.Process.Signal(syscall.SIGTERM) }
	col.WaitDelay = time.Minute
	if err := col.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = col.Cancel(); _ = col.Wait() }()

	r := &result{spec: spec}
	benchutil.Logf("%s: %d collectors started; applying the registry", spec.label, len(spec.clusters))
	t0 := time.Now()
	syncProfile := profileSync(ctx, metrics, cfg.profile(spec, "sync"))
	cpuPIDs := [3][]int{{h.cmd.Process.Pid}, {col.Process.Pid}, append(benchutil.PIDsNamed("kube-apiserver"), benchutil.PIDsNamed("etcd")...)}
	cpu0 := cpuOf(cpuPIDs)
	if err := applyRegistry(ctx, h.rest, spec.ns, false, cfg.everything); err != nil {
		return nil, err
	}
	synced := func() error { return benchutil.ClustersSynced(ctx, h.rest, len(spec.clusters)) }
	if err := waitFor(ctx, 20*time.Minute, "every cluster synced", synced); err != nil {
		return nil, err
	}
	r.sync = time.Since(t0)
	r.syncCPU = cpuSince(cpuPIDs, cpu0)
	benchutil.Logf("%s: every cluster synced %s after the registry apply; CPU meanwhile: hub %s, collectors %s, apiservers and etcd %s",
		spec.label, r.sync.Round(time.Millisecond), r.syncCPU[0], r.syncCPU[1], r.syncCPU[2])
	if err := syncProfile(); err != nil {
		return nil, err
	}
	// Every object counted in the cache, not only the markers.
	want := len(spec.clusters) * spec.perClus
	if err := waitFor(ctx, 5*time.Minute, "every object cached", func() error {
		code, body, err := benchutil.Get(ctx, h.rest+"/api/v1/namespaces/"+spec.ns+"/pods?limit=1")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("list: %d %s", code, body)
		}
		var l struct {
			Metadata struct {
				RemainingItemCount *int   `json:"remainingItemCount"`
				ResourceVersion    string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return err
		}
		if l.Metadata.RemainingItemCount == nil || *l.Metadata.RemainingItemCount+1 != want {
			return fmt.Errorf("list holds %v+1 objects, want %d", l.Metadata.RemainingItemCount, want)
		}
		r.listRVBytes = len(l.Metadata.ResourceVersion)
		return nil
	}); err != nil {
		return nil, err
	}
	pid := h.cmd.Process.Pid

	if err := measureReads(ctx, cfg, h.rest, spec, r); err != nil {
		return nil, err
	}
	if cfg.profileDir != "" {
		i := 0
		if err := profile(ctx, metrics, cfg.profile(spec, "list"), func(ctx context.Context) {
			i++
			_, _, _ = benchutil.Get(ctx, fmt.Sprintf("%s/clusters/%s/api/v1/namespaces/%s/pods?limit=%d", h.rest, spec.clusters[i%len(spec.clusters)], spec.ns, cfg.objects))
		}); err != nil {
			return nil, err
		}
		if err := profile(ctx, metrics, cfg.profile(spec, "kubectl"), func(ctx context.Context) {
			_ = exec.CommandContext(ctx, "kubectl", "--server", h.rest, "get", "pods", "-A", "-l", "tier=target", "--no-headers").Run()
		}); err != nil {
			return nil, err
		}
	}
	if err := measureKubectl(ctx, cfg, h.rest, spec, len(spec.clusters)*((spec.perClus+99)/100), r); err != nil {
		return nil, err
	}
	if err := measureWatchEvent(ctx, h.rest, fleet, spec, r); err != nil {
		return nil, err
	}
	registryProfile := profileSync(ctx, metrics, cfg.profile(spec, "registry"))
	cpu1 := cpuOf(cpuPIDs)
	if err := measureRegistryChange(ctx, h.rest, "nats://"+natsAddr, spec, cfg.everything, r); err != nil {
		return nil, err
	}
	r.registryCPU = cpuSince(cpuPIDs, cpu1)
	r.rssBusyMB = benchutil.ProcMB(pid, "VmRSS:")
	if busy := cfg.profile(spec, "busy"); busy != "" {
		// What the last collection found live, not a forced one: a
		// collection here would lower the heap goal the steady RSS
		// below reflects.
		if err := save(ctx, saved{metrics + "/debug/pprof/heap", busy + ".heap.pprof"}); err != nil {
			return nil, err
		}
	}
	if err := registryProfile(); err != nil {
		return nil, err
	}
	if r.goroutines, err = benchutil.Goroutines(ctx, metrics); err != nil {
		return nil, err
	}
	// Steady is the hub with every cluster synced and nothing changing
	// but the collectors' heartbeats, cfg.quiet after the last change:
	// the time is the measurement (NATS drops a stream block's cache 10 s
	// after its last use and a publish's dedup id after the stream's
	// 2-minute window; Go collects at least every 2 minutes and returns
	// freed pages over seconds), not a wait for a condition.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.quiet):
	}
	r.rssSteadyMB, r.rssPeakMB = benchutil.ProcMB(pid, "VmRSS:"), benchutil.ProcMB(pid, "VmHWM:")
	r.rssAnonMB, r.rssFileMB = benchutil.ProcMB(pid, "RssAnon:"), benchutil.ProcMB(pid, "RssFile:")
	benchutil.Logf("%s: hub RSS %.0f MB right after the registry change, %.0f MB steady (%s later: %.0f anonymous, %.0f file-backed), %.0f MB peak",
		spec.label, r.rssBusyMB, r.rssSteadyMB, cfg.quiet, r.rssAnonMB, r.rssFileMB, r.rssPeakMB)
	if h.cgroup != "" {
		peak, err := benchutil.CgroupPeak(h.cgroup)
		if err != nil {
			return nil, err
		}
		r.cgroupPeakMB = float64(peak) / (1 << 20)
		benchutil.Logf("%s: the hub's cgroup peaked at %.0f MB; OOM kills %d", spec.label, r.cgroupPeakMB, benchutil.OOMKills(h.cgroup))
	}
	if r.goMem, err = goMemory(ctx, metrics); err != nil {
		return nil, err
	}
	if steady := cfg.profile(spec, "steady"); steady != "" {
		if err := steadyProfile(ctx, metrics, steady); err != nil {
			return nil, err
		}
	}
	// The same Gets at rest: right after a sync they share the machine
	// with the ingest's aftermath (Badger's compactions, the collection
	// of the sync's garbage), which moved the p50 by 3x between runs.
	if r.getRestP50, r.getRestP99, err = measureGets(ctx, cfg, h.rest, spec); err != nil {
		return nil, err
	}
	benchutil.Logf("%s: per-cluster Get at rest p50 %s p99 %s", spec.label, r.getRestP50, r.getRestP99)

	benchutil.Logf("%s: restarting the hub", spec.label)
	if err := h.stop(); err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 5*time.Minute, "hub ready after restart", ready); err != nil {
		return nil, err
	}
	r.restartReady = time.Since(t1)
	if err := waitFor(ctx, 5*time.Minute, "every cluster synced after restart", synced); err != nil {
		return nil, err
	}
	r.restartSynced = time.Since(t1)
	benchutil.Logf("%s: hub ready %s and synced %s after a restart", spec.label, r.restartReady.Round(time.Millisecond), r.restartSynced.Round(time.Millisecond))
	return r, nil
}

func pairs(a, b []string) []string {
	out := make([]string, len(a))
	for i := range a {
		out[i] = a[i] + "=" + b[i]
	}
	return out
}

// measureGets times cfg.gets per-cluster Gets of random Pods of random
// clusters: p50 and p99.
func measureGets(ctx context.Context, cfg config, rest string, spec hubSpec) (p50, p99 time.Duration, err error) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var gets []time.Duration
	for range cfg.gets {
		c := spec.clusters[rnd.IntN(len(spec.clusters))]
		url := rest + "/clusters/" + c + "/api/v1/namespaces/" + spec.ns + "/pods/" + podName(rnd.IntN(spec.perClus))
		t := time.Now()
		code, body, err := benchutil.Get(ctx, url)
		if err != nil {
			return 0, 0, err
		}
		if code != http.StatusOK {
			return 0, 0, fmt.Errorf("GET %s: %d %s", url, code, body)
		}
		gets = append(gets, time.Since(t))
	}
	return benchutil.Percentile(gets, 0.5), benchutil.Percentile(gets, 0.99), nil
}

func measureReads(ctx context.Context, cfg config, rest string, spec hubSpec, r *result) error {
	var err error
	if r.getP50, r.getP99, err = measureGets(ctx, cfg, rest, spec); err != nil {
		return err
	}
	// A per-cluster list of as many objects as a cluster of the wide
	// fleet holds (a first page at the 3-cluster hub).
	per := r.spec.perClus
	if len(spec.clusters) == 3 {
		per = cfg.objects
	}
	var lists []time.Duration
	for i := range cfg.repeat * 4 {
		c := spec.clusters[i%len(spec.clusters)]
		url := fmt.Sprintf("%s/clusters/%s/api/v1/namespaces/%s/pods?limit=%d", rest, c, spec.ns, per)
		t := time.Now()
		code, body, err := benchutil.Get(ctx, url)
		if err != nil {
			return err
		}
		if code != http.StatusOK || bytes.Count(body, []byte(`"kind":"Pod"`)) != per {
			return fmt.Errorf("GET %s: %d, %d Pods, want %d", url, code, bytes.Count(body, []byte(`"kind":"Pod"`)), per)
		}
		lists = append(lists, time.Since(t))
	}
	r.list = benchutil.Percentile(lists, 0.5)
	benchutil.Logf("%s: per-cluster Get p50 %s p99 %s; per-cluster list of %d %s", spec.label, r.getP50, r.getP99, per, r.list)
	return nil
}

func measureKubectl(ctx context.Context, cfg config, rest string, spec hubSpec, want int, r *result) error {
	var runs []time.Duration
	for range cfg.repeat {
		t := time.Now()
		out, err := exec.CommandContext(ctx, "kubectl", "--server", rest, "get", "pods", "-A", "-l", "tier=target", "--no-headers").Output()
		if err != nil {
			return fmt.Errorf("kubectl: %w", err)
		}
		runs = append(runs, time.Since(t))
		if n := bytes.Count(out, []byte("\n")); n != want {
			return fmt.Errorf("kubectl get pods -A -l tier=target printed %d rows, want %d", n, want)
		}
		r.kubectlRows = want
	}
	r.kubectl = benchutil.Percentile(runs, 0.5)
	benchutil.Logf("%s: kubectl get pods -A -l tier=target (%d rows) %s", spec.label, want, r.kubectl)
	return nil
}

// measureWatchEvent opens a Kubernetes API watch on one Pod in the first
// cluster, changes the Pod in its apiserver and measures the MODIFIED line.
func measureWatchEvent(ctx context.Context, rest string, fleet *harness.Fleet, spec hubSpec, r *result) error {
	name := podName(1)
	url := rest + "/clusters/" + spec.clusters[0] + "/api/v1/namespaces/" + spec.ns + "/pods?watch=1&fieldSelector=metadata.name%3D" + name
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(wctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("watch: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	// The initial ADDED event: the watch is established.
	if !sc.Scan() {
		return fmt.Errorf("watch ended before its first event: %v", sc.Err())
	}
	cs := fleet.Cluster(spec.contexts[0]).Clientset()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"bench-touch":"%d"}}}`, time.Now().UnixNano())
	if _, err := cs.CoreV1().Pods(spec.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("watch line: %w", err)
		}
		if ev.Type == "MODIFIED" {
			r.eventBytes, r.eventRVBytes = len(sc.Bytes()), len(ev.Object.Metadata.ResourceVersion)
			benchutil.Logf("%s: MODIFIED event %d bytes, its resourceVersion %d; a list's resourceVersion %d", spec.label, r.eventBytes, r.eventRVBytes, r.listRVBytes)
			return nil
		}
	}
	return fmt.Errorf("no MODIFIED event: %v", sc.Err())
}

// measureRegistryChange adds ConfigMaps to the registry and waits until
// every cluster's collector reports, in the registry's status, that it
// caches them at the new generation; then reads when each report was
// stored (statusWrites).
func measureRegistryChange(ctx context.Context, rest, natsURL string, spec hubSpec, everything bool, r *result) error {
	t := time.Now()
	if err := applyRegistry(ctx, rest, spec.ns, true, everything); err != nil {
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, "every collector took the registry change", func() error {
		code, body, err := benchutil.Get(ctx, rest+"/v1/registries/fleet")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET registry: %d %s", code, body)
		}
		var resp struct {
			Registry struct {
				Metadata struct {
					Generation int64 `json:"generation"`
				} `json:"metadata"`
				Status struct {
					Conditions []metav1.Condition `json:"conditions"`
				} `json:"status"`
			} `json:"registry"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			return err
		}
		reg := resp.Registry
		done := 0
		for _, c := range reg.Status.Conditions {
			if strings.HasSuffix(c.Type, "/"+registry.ClusterMatched) && c.ObservedGeneration == reg.Metadata.Generation && strings.Contains(c.Message, "configmaps") {
				done++
			}
		}
		if done != len(spec.clusters) {
			return fmt.Errorf("%d of %d collectors report generation %d", done, len(spec.clusters), reg.Metadata.Generation)
		}
		return nil
	}); err != nil {
		return err
	}
	r.registryChange = time.Since(t)
	benchutil.Logf("%s: a registry change reached every collector in %s", spec.label, r.registryChange.Round(time.Millisecond))
	writes, err := statusWrites(ctx, natsURL, "fleet", t)
	if err != nil {
		return err
	}
	if len(writes) != len(spec.clusters) {
		return fmt.Errorf("%d clusters' status on registry fleet, want %d", len(writes), len(spec.clusters))
	}
	r.statusWrites = [3]time.Duration{benchutil.Percentile(writes, 0.5), benchutil.Percentile(writes, 0.9), slices.Max(writes)}
	benchutil.Logf("%s: the collectors' status writes stored after %s (p50), %s (p90), %s (last)", spec.label, r.statusWrites[0], r.statusWrites[1], r.statusWrites[2])
	return nil
}

// benchHubPassword is the hub's NATS password in the benchmark.
const benchHubPassword = "hub-secret-0123456789abcdef"

// statusWrites reads, as the hub's NATS user, when each cluster's last
// status on registry name was stored, as a time since t: the spread of a
// change over the fleet, which the REST status (conditions keep their
// transition time while True) does not show, and without polling it.
func statusWrites(ctx context.Context, natsURL, name string, t time.Time) ([]time.Duration, error) {
	nc, err := nats.Connect(natsURL, nats.UserInfo(natsserver.HubUser, benchHubPassword))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, natsnames.RegistryStatusBucket)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, natsnames.StatusKey("*", name), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []time.Duration
	for e := range w.Updates() {
		if e == nil {
			return out, nil // every key's last value is in
		}
		out = append(out, e.Created().Sub(t))
	}
	return nil, fmt.Errorf("the status watch ended before every key was read")
}

// cpuOf is the CPU time each group of processes has used so far (a
// process gone counts nothing).
func cpuOf(groups [3][]int) (out [3]time.Duration) {
	for i, pids := range groups {
		for _, pid := range pids {
			if c, err := benchutil.ProcessCPU(pid); err == nil {
				out[i] += c
			}
		}
	}
	return out
}

// cpuSince is the CPU each group used since cpuOf(groups) read before.
func cpuSince(groups [3][]int, before [3]time.Duration) (out [3]time.Duration) {
	for i, c := range cpuOf(groups) {
		out[i] = c - before[i]
	}
	return out
}
