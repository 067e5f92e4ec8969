// Command bench-fleet is the fleet simulator and fleet-scale benchmark: one
// hub (a `fleetview up` process with per-cluster NATS credentials, its
// defaults otherwise) and N member clusters, each a real collector (the
// production app.RunCollector, its own NATS user and account) over a few
// real kube-apiservers, every cluster a context on one of them. N
// collectors need no N apiservers: each lists and watches its apiserver as
// a member of that size would, and the hub cannot tell them apart.
//
// Side by side in one run, the same hub with 3 clusters holding the same
// number of objects in all, and the figures the fleet issue asks for: time
// for every cluster to sync after a registry apply, hub RSS (steady and
// peak), per-cluster Get p50/p99 and list, `kubectl get pods -A -l <1%>`
// (a real kubectl process), the size of a list's resourceVersion and of a
// MODIFIED watch event, a registry change reaching every collector, and a
// hub restart back to ready and synced.
//
// Scale comes from the environment:
//
//	FV_FLEET_CLUSTERS=200 FV_FLEET_OBJECTS=100 (Pods per cluster)
//	FV_FLEET_APISERVERS=2 FV_FLEET_GETS=500 FV_FLEET_REPEAT=5
//
// docs/benchmarks/fleet.md records the results.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/registry"
)

type config struct {
	clusters, objects, apiservers, gets, repeat int
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "collectors" {
		if err := collectorsProcess(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "error: collectors process:", err)
			os.Exit(1)
		}
		return
	}
	cfg := config{
		clusters: envInt("FV_FLEET_CLUSTERS", 200), objects: envInt("FV_FLEET_OBJECTS", 100),
		apiservers: envInt("FV_FLEET_APISERVERS", 2), gets: envInt("FV_FLEET_GETS", 500), repeat: envInt("FV_FLEET_REPEAT", 5),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

// A fleet namespace holds every simulated member's Pods (each cluster is a
// context on one apiserver, so all clusters of that apiserver hold the
// same Pods); the big namespace holds, on the first apiserver, the same
// number of objects in all for the 3-cluster hub.
const (
	fleetNS = "fleet"
	bigNS   = "big"
)

// pod i of a namespace: one in a hundred is tier=target (the 1% selector).
func pod(ns string, i int) *corev1.Pod {
	tier := "web"
	if i%100 == 0 {
		tier = "target"
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podName(i), Labels: map[string]string{"app": "shop", "tier": tier}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%50),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/shop:1.2.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	harness.DefaultPod(p)
	return p
}

func podName(i int) string { return fmt.Sprintf("pod-%07d", i) }

func clusterName(i int) string { return fmt.Sprintf("c%04d", i) }

// hubSpec is one hub to measure: its clusters (names and the apiserver
// context each collects), the namespace they cache and how many Pods each
// cluster holds there.
type hubSpec struct {
	label    string
	clusters []string
	contexts []string
	ns       string
	perClus  int
}

func run(ctx context.Context, cfg config) error {
	names := make([]string, cfg.apiservers)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
	}
	logf("starting %d kube-apiservers", cfg.apiservers)
	fleet, err := harness.Start(ctx, harness.Options{Clusters: names})
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Stop() }()
	total := cfg.clusters * cfg.objects
	big := (total + 2) / 3
	t0 := time.Now()
	for i, c := range fleet.Clusters() {
		if err := c.GrantCollectorReadAll(ctx); err != nil {
			return err
		}
		nss := []string{fleetNS}
		if i == 0 {
			nss = append(nss, bigNS)
		}
		for _, ns := range nss {
			if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		if err := c.StorePods(ctx, cfg.objects, 2, func(i int) (*corev1.Pod, error) { return pod(fleetNS, i), nil }); err != nil {
			return err
		}
		if i == 0 {
			if err := c.StorePods(ctx, big, 2, func(i int) (*corev1.Pod, error) { return pod(bigNS, i), nil }); err != nil {
				return err
			}
		}
	}
	logf("stored %d Pods per apiserver and %d for the 3-cluster hub in %s", cfg.objects, big, time.Since(t0).Round(time.Second))

	dir, err := os.MkdirTemp("", "fv-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := buildFleetview(ctx, dir)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kubeconfig, "collector"); err != nil {
		return err
	}

	small := hubSpec{label: "3 clusters", ns: bigNS, perClus: big}
	for i := range 3 {
		small.clusters = append(small.clusters, clusterName(i))
		small.contexts = append(small.contexts, names[0])
	}
	wide := hubSpec{label: fmt.Sprintf("%d clusters", cfg.clusters), ns: fleetNS, perClus: cfg.objects}
	for i := range cfg.clusters {
		wide.clusters = append(wide.clusters, clusterName(i))
		wide.contexts = append(wide.contexts, names[i%len(names)])
	}
	var results []*result
	for _, spec := range []hubSpec{small, wide} {
		r, err := measure(ctx, cfg, filepath.Join(dir, strings.ReplaceAll(spec.label, " ", "-")), bin, kubeconfig, fleet, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.label, err)
		}
		results = append(results, r)
	}
	printResults(cfg, total, results)
	return nil
}

func buildFleetview(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "fleetview")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fleetview/fleetview/cmd/fleetview")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// result is what one hub measured.
type result struct {
	spec                        hubSpec
	sync                        time.Duration
	rssSteadyMB, rssPeakMB      float64
	getP50, getP99, list        time.Duration
	kubectl                     time.Duration
	kubectlRows                 int
	listRVBytes, eventBytes     int
	eventRVBytes                int
	registryChange              time.Duration
	restartReady, restartSynced time.Duration
	goroutines                  int
}

// goroutines is the hub's goroutine count, from its profile endpoint.
func goroutines(ctx context.Context, metrics string) (int, error) {
	code, body, err := get(ctx, metrics+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(string(body), "goroutine profile: total %d", &n); code != http.StatusOK || err != nil {
		return 0, fmt.Errorf("goroutine profile: %d %v", code, err)
	}
	return n, nil
}

func freeAddr() (string, int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, err
	}
	defer l.Close()
	a := l.Addr().(*net.TCPAddr)
	return a.String(), a.Port, nil
}

// hub is one `fleetview up` process.
type hub struct {
	args []string
	bin  string
	log  string
	cmd  *exec.Cmd
	rest string
}

func (h *hub) start(ctx context.Context) error {
	f, err := os.OpenFile(h.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	h.cmd = exec.CommandContext(ctx, h.bin, h.args...)
	h.cmd.Stdout, h.cmd.Stderr = f, f
	h.cmd.Cancel = func() error { return h.cmd.Process.Signal(syscall.SIGTERM) }
	if err := h.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	go func() { _ = h.cmd.Wait(); f.Close() }()
	return nil
}

func (h *hub) stop() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	for range 600 {
		if err := h.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("hub did not stop within 60 s of SIGTERM")
}

// waitFor polls cond every 100 ms until it holds or timeout passes; the
// last error it returned names what was still missing.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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

func measure(ctx context.Context, cfg config, dir, bin, kubeconfig string, fleet *harness.Fleet, spec hubSpec) (*result, error) {
	logf("%s: starting the hub", spec.label)
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
	if err := os.WriteFile(hubPass, []byte("hub-secret-0123456789abcdef"), 0o600); err != nil {
		return nil, err
	}
	grpcAddr, _, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, _, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, natsPort, err := freeAddr()
	if err != nil {
		return nil, err
	}
	h := &hub{bin: bin, log: filepath.Join(dir, "hub.log"), rest: "http://" + httpAddr, args: []string{"up",
		"--state-dir", filepath.Join(dir, "state"), "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--nats-host", "127.0.0.1", "--nats-port", strconv.Itoa(natsPort),
		"--nats-users-file", usersFile, "--nats-hub-password-file", hubPass}}
	metricsAddr, _, err := freeAddr()
	if err != nil {
		return nil, err
	}
	h.args = append(h.args, "--metrics-addr", metricsAddr)
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = h.stop() }()
	ready := func() error {
		code, body, err := get(ctx, h.rest+"/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
	}
	if err := waitFor(ctx, 5*time.Minute, "hub ready", ready); err != nil {
		return nil, fmt.Errorf("%w (log %s)", err, h.log)
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
	logf("%s: %d collectors started; applying the registry", spec.label, len(spec.clusters))
	t0 := time.Now()
	if err := applyRegistry(ctx, h.rest, spec.ns, false); err != nil {
		return nil, err
	}
	synced := func() error { return clustersSynced(ctx, h.rest, len(spec.clusters)) }
	if err := waitFor(ctx, 20*time.Minute, "every cluster synced", synced); err != nil {
		return nil, err
	}
	r.sync = time.Since(t0)
	logf("%s: every cluster synced %s after the registry apply", spec.label, r.sync.Round(time.Millisecond))
	// Every object counted in the cache, not only the markers.
	want := len(spec.clusters) * spec.perClus
	if err := waitFor(ctx, 5*time.Minute, "every object cached", func() error {
		code, body, err := get(ctx, h.rest+"/api/v1/namespaces/"+spec.ns+"/pods?limit=1")
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
	if dir := os.Getenv("FV_FLEET_PROFILE_DIR"); dir != "" {
		base := filepath.Join(dir, strings.ReplaceAll(spec.label, " ", "-"))
		i := 0
		if err := profile(ctx, "http://"+metricsAddr, base+"-list", func(ctx context.Context) {
			i++
			_, _, _ = get(ctx, fmt.Sprintf("%s/clusters/%s/api/v1/namespaces/%s/pods?limit=%d", h.rest, spec.clusters[i%len(spec.clusters)], spec.ns, cfg.objects))
		}); err != nil {
			return nil, err
		}
		if err := profile(ctx, "http://"+metricsAddr, base+"-kubectl", func(ctx context.Context) {
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
	if err := measureRegistryChange(ctx, h.rest, spec, r); err != nil {
		return nil, err
	}
	r.rssSteadyMB, r.rssPeakMB = procMB(pid, "VmRSS:"), procMB(pid, "VmHWM:")
	if r.goroutines, err = goroutines(ctx, "http://"+metricsAddr); err != nil {
		return nil, err
	}
	logf("%s: hub RSS %.0f MB steady, %.0f MB peak", spec.label, r.rssSteadyMB, r.rssPeakMB)

	logf("%s: restarting the hub", spec.label)
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
	logf("%s: hub ready %s and synced %s after a restart", spec.label, r.restartReady.Round(time.Millisecond), r.restartSynced.Round(time.Millisecond))
	return r, nil
}

func pairs(a, b []string) []string {
	out := make([]string, len(a))
	for i := range a {
		out[i] = a[i] + "=" + b[i]
	}
	return out
}

func applyRegistry(ctx context.Context, rest, ns string, withConfigMaps bool) error {
	sels := []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": ns}}
	if withConfigMaps {
		sels = append(sels, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns})
	}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{"targetCluster": map[string]any{}, "resourceSelectors": sels},
	})
	return waitFor(ctx, time.Minute, "apply the registry", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rest+"/v1/registries", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /v1/registries: %d %s", resp.StatusCode, b)
		}
		return nil
	})
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

func measureReads(ctx context.Context, cfg config, rest string, spec hubSpec, r *result) error {
	rnd := rand.New(rand.NewPCG(1, 2))
	var gets []time.Duration
	for range cfg.gets {
		c := spec.clusters[rnd.IntN(len(spec.clusters))]
		url := rest + "/clusters/" + c + "/api/v1/namespaces/" + spec.ns + "/pods/" + podName(rnd.IntN(spec.perClus))
		t := time.Now()
		code, body, err := get(ctx, url)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", url, code, body)
		}
		gets = append(gets, time.Since(t))
	}
	r.getP50, r.getP99 = pct(gets, 0.5), pct(gets, 0.99)
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
		code, body, err := get(ctx, url)
		if err != nil {
			return err
		}
		if code != http.StatusOK || bytes.Count(body, []byte(`"kind":"Pod"`)) != per {
			return fmt.Errorf("GET %s: %d, %d Pods, want %d", url, code, bytes.Count(body, []byte(`"kind":"Pod"`)), per)
		}
		lists = append(lists, time.Since(t))
	}
	r.list = pct(lists, 0.5)
	logf("%s: per-cluster Get p50 %s p99 %s; per-cluster list of %d %s", spec.label, r.getP50, r.getP99, per, r.list)
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
	r.kubectl = pct(runs, 0.5)
	logf("%s: kubectl get pods -A -l tier=target (%d rows) %s", spec.label, want, r.kubectl)
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
			logf("%s: MODIFIED event %d bytes, its resourceVersion %d; a list's resourceVersion %d", spec.label, r.eventBytes, r.eventRVBytes, r.listRVBytes)
			return nil
		}
	}
	return fmt.Errorf("no MODIFIED event: %v", sc.Err())
}

// measureRegistryChange adds ConfigMaps to the registry and waits until
// every cluster's collector reports, in the registry's status, that it
// caches them at the new generation.
func measureRegistryChange(ctx context.Context, rest string, spec hubSpec, r *result) error {
	t := time.Now()
	if err := applyRegistry(ctx, rest, spec.ns, true); err != nil {
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, "every collector took the registry change", func() error {
		code, body, err := get(ctx, rest+"/v1/registries/fleet")
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
	logf("%s: a registry change reached every collector in %s", spec.label, r.registryChange.Round(time.Millisecond))
	return nil
}

func procMB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func printResults(cfg config, total int, rs []*result) {
	small, wide := rs[0], rs[1]
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2fx", float64(a)/float64(b)) }
	fmt.Printf("\nfleet benchmark: %d objects in all; %d clusters x %d Pods vs 3 clusters x %d Pods; %d apiservers\n\n",
		total, cfg.clusters, cfg.objects, small.spec.perClus, cfg.apiservers)
	fmt.Printf("| figure | 3 clusters | %d clusters | ratio |\n|---|---|---|---|\n", cfg.clusters)
	fmt.Printf("| all clusters synced after a registry apply | %s | %s | %s |\n", small.sync.Round(time.Millisecond), wide.sync.Round(time.Millisecond), ratio(wide.sync, small.sync))
	fmt.Printf("| hub RSS steady / peak (MB) | %.0f / %.0f | %.0f / %.0f | %.2fx |\n", small.rssSteadyMB, small.rssPeakMB, wide.rssSteadyMB, wide.rssPeakMB, wide.rssSteadyMB/small.rssSteadyMB)
	fmt.Printf("| hub goroutines | %d | %d | %.1f per cluster more |\n", small.goroutines, wide.goroutines, float64(wide.goroutines-small.goroutines)/float64(len(wide.spec.clusters)-len(small.spec.clusters)))
	fmt.Printf("| per-cluster Get p50 / p99 | %s / %s | %s / %s | %s |\n", small.getP50, small.getP99, wide.getP50, wide.getP99, ratio(wide.getP50, small.getP50))
	fmt.Printf("| per-cluster list of %d Pods (median) | %s | %s | %s |\n", cfg.objects, small.list, wide.list, ratio(wide.list, small.list))
	fmt.Printf("| kubectl get pods -A -l tier=target (%d rows, median) | %s | %s | %s |\n", wide.kubectlRows, small.kubectl, wide.kubectl, ratio(wide.kubectl, small.kubectl))
	fmt.Printf("| a list's resourceVersion (bytes) | %d | %d | |\n", small.listRVBytes, wide.listRVBytes)
	fmt.Printf("| a MODIFIED watch event (bytes; its resourceVersion) | %d (%d) | %d (%d) | |\n", small.eventBytes, small.eventRVBytes, wide.eventBytes, wide.eventRVBytes)
	fmt.Printf("| a registry change reaching every collector | %s | %s | |\n", small.registryChange.Round(time.Millisecond), wide.registryChange.Round(time.Millisecond))
	fmt.Printf("| hub restart: ready / every cluster synced | %s / %s | %s / %s | |\n", small.restartReady.Round(time.Millisecond), small.restartSynced.Round(time.Millisecond), wide.restartReady.Round(time.Millisecond), wide.restartSynced.Round(time.Millisecond))
}

// collectorsProcess runs one production collector (app.RunCollector, with
// the collector command's flag defaults) per "cluster=context" argument,
// each with its own NATS credentials from USERS-DIR/<cluster>.
func collectorsProcess(args []string) error {
	if len(args) < 4 {
		return fmt.Errorf("usage: bench-fleet collectors KUBECONFIG USERS-DIR NATS-URL CLUSTER=CONTEXT...")
	}
	kubeconfig, usersDir, natsURL := args[0], args[1], args[2]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var wg sync.WaitGroup
	errs := make(chan error, len(args))
	for _, a := range args[3:] {
		cluster, context, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want CLUSTER=CONTEXT", a)
		}
		var o app.CollectorOptions
		fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--cluster", cluster, "--kubeconfig", kubeconfig, "--context", context,
			"--nats-url", natsURL, "--nats-user-file", filepath.Join(usersDir, cluster)}); err != nil {
			return err
		}
		if err := errors.Join(o.Validate()...); err != nil {
			return err
		}
		wg.Go(func() {
			if err := app.RunCollector(ctx, o, log.With("cluster", cluster)); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("collector %s: %w", cluster, err)
				stop()
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(slices.Collect(func(yield func(error) bool) {
		for e := range errs {
			if !yield(e) {
				return
			}
		}
	})...)
}

// profile writes the hub's CPU profile (to path+".cpu.pprof"), heap
// profile (path+".heap.pprof") and goroutines (path+".goroutines.txt") while load runs again and again, for
// finding what a request costs per cluster it does not touch.
func profile(ctx context.Context, metrics, path string, load func(context.Context)) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			load(pctx)
		}
	}()
	for _, p := range []struct{ url, file string }{{metrics + "/debug/pprof/profile?seconds=5", path + ".cpu.pprof"}, {metrics + "/debug/pprof/heap", path + ".heap.pprof"}, {metrics + "/debug/pprof/goroutine?debug=1", path + ".goroutines.txt"}} {
		code, body, err := get(ctx, p.url)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", p.url, code, body)
		}
		if err := os.WriteFile(p.file, body, 0o600); err != nil {
			return err
		}
	}
	logf("profiles in %s.*.pprof", path)
	return nil
}
