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
//	FV_FLEET_CLUSTERS=300 FV_FLEET_OBJECTS=100 (Pods per cluster)
//	FV_FLEET_APISERVERS=2 FV_FLEET_GETS=500 FV_FLEET_REPEAT=5
//	FV_FLEET_QUIET=15s (how long nothing changes before the steady RSS)
//	FV_FLEET_REGISTRY=everything (a `*` registry, every kind of every
//	cluster, ConfigMaps excluded until the registry change adds them)
//
// docs/benchmarks/fleet.md records the results.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
)

type config struct {
	clusters, objects, apiservers, gets, repeat int
	// hubMemory, when set (FV_FLEET_HUB_MEMORY, a quantity such as 2Gi),
	// is the memory limit of a cgroup each hub runs in, as in a
	// container with that limit.
	hubMemory int64
	// quiet is how long the hub runs with nothing changing before its
	// steady RSS is read.
	quiet time.Duration
	// profileDir, when set (FV_FLEET_PROFILE_DIR), receives the hub's
	// profiles, each named after its hub (hubSpec.slug).
	profileDir string
	// everything (FV_FLEET_REGISTRY=everything) selects every kind of
	// every cluster (`*`) instead of the fleet namespace's Pods.
	everything bool
}

// profile is where the profile of spec's hub named what goes in
// cfg.profileDir; "" when no profiles are asked for.
func (cfg config) profile(spec hubSpec, what string) string {
	if cfg.profileDir == "" {
		return ""
	}
	return filepath.Join(cfg.profileDir, spec.slug()+"-"+what)
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
		clusters: benchutil.EnvInt("FV_FLEET_CLUSTERS", 300), objects: benchutil.EnvInt("FV_FLEET_OBJECTS", 100),
		apiservers: benchutil.EnvInt("FV_FLEET_APISERVERS", 2), gets: benchutil.EnvInt("FV_FLEET_GETS", 500), repeat: benchutil.EnvInt("FV_FLEET_REPEAT", 5),
	}
	if v := os.Getenv("FV_FLEET_HUB_MEMORY"); v != "" {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Value() <= 0 {
			fmt.Fprintf(os.Stderr, "error: FV_FLEET_HUB_MEMORY %q: want a memory quantity such as 2Gi\n", v)
			os.Exit(2)
		}
		cfg.hubMemory = q.Value()
	}
	cfg.profileDir = os.Getenv("FV_FLEET_PROFILE_DIR")
	cfg.everything = os.Getenv("FV_FLEET_REGISTRY") == "everything"
	cfg.quiet = 15 * time.Second
	if v := os.Getenv("FV_FLEET_QUIET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "error: FV_FLEET_QUIET %q: want a positive duration such as 2m30s\n", v)
			os.Exit(2)
		}
		cfg.quiet = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// A fleet namespace holds every simulated member's Pods (each cluster is a
// context on one apiserver, so all clusters of that apiserver hold the
// same Pods); the big namespace holds, on an apiserver of its own
// (bigAPIServer), the same number of objects in all for the 3-cluster hub.
const (
	fleetNS = "fleet"
	bigNS   = "big"
	// bigAPIServer serves the 3-cluster hub only and is stopped once that
	// hub is measured: its watch cache of the 1M Pods held 7 GB, which
	// the many-cluster hub then measured with the page cache squeezed
	// (kswapd busy, 200 MB free) on the same machine.
	bigAPIServer = "big"
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

// slug is the hub's label as a file name.
func (s hubSpec) slug() string { return strings.ReplaceAll(s.label, " ", "-") }

func run(ctx context.Context, cfg config) error {
	names := make([]string, cfg.apiservers)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
	}
	benchutil.Logf("starting %d kube-apiservers and one for the 3-cluster hub", cfg.apiservers)
	fleet, err := harness.Start(ctx, harness.Options{Clusters: append(append([]string(nil), names...), bigAPIServer)})
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Stop() }()
	total := cfg.clusters * cfg.objects
	big := (total + 2) / 3
	t0 := time.Now()
	for _, c := range fleet.Clusters() {
		if err := c.GrantCollectorReadAll(ctx); err != nil {
			return err
		}
		ns, n := fleetNS, cfg.objects
		if c.Name == bigAPIServer {
			ns, n = bigNS, big
		}
		if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := c.StorePods(ctx, n, 2, func(i int) (*corev1.Pod, error) { return pod(ns, i), nil }); err != nil {
			return err
		}
	}
	benchutil.Logf("stored %d Pods per apiserver and %d for the 3-cluster hub in %s", cfg.objects, big, time.Since(t0).Round(time.Second))

	dir, bin, kubeconfig, err := benchutil.Workdir(ctx, fleet, "fv-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	small := hubSpec{label: "3 clusters", ns: bigNS, perClus: big}
	for i := range 3 {
		small.clusters = append(small.clusters, clusterName(i))
		small.contexts = append(small.contexts, bigAPIServer)
	}
	wide := hubSpec{label: fmt.Sprintf("%d clusters", cfg.clusters), ns: fleetNS, perClus: cfg.objects}
	for i := range cfg.clusters {
		wide.clusters = append(wide.clusters, clusterName(i))
		wide.contexts = append(wide.contexts, names[i%len(names)])
	}
	var results []*result
	for _, spec := range []hubSpec{small, wide} {
		r, err := measure(ctx, cfg, filepath.Join(dir, spec.slug()), bin, kubeconfig, fleet, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.label, err)
		}
		results = append(results, r)
		if spec.label == small.label {
			if err := fleet.Cluster(bigAPIServer).Stop(); err != nil {
				return fmt.Errorf("stop the 3-cluster hub's apiserver: %w", err)
			}
		}
	}
	printResults(cfg, total, results)
	return nil
}

func printResults(cfg config, total int, rs []*result) {
	small, wide := rs[0], rs[1]
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2fx", float64(a)/float64(b)) }
	fmt.Printf("\nfleet benchmark: %d objects in all; %d clusters x %d Pods vs 3 clusters x %d Pods; %d apiservers\n\n",
		total, cfg.clusters, cfg.objects, small.spec.perClus, cfg.apiservers)
	if cfg.hubMemory > 0 {
		fmt.Printf("each hub in a memory cgroup limited to %d MiB (FV_FLEET_HUB_MEMORY), its --memory-limit the default (auto)\n\n", cfg.hubMemory>>20)
	}
	fmt.Printf("| figure | 3 clusters | %d clusters | ratio |\n|---|---|---|---|\n", cfg.clusters)
	fmt.Printf("| all clusters synced after a registry apply | %s | %s | %s |\n", small.sync.Round(time.Millisecond), wide.sync.Round(time.Millisecond), ratio(wide.sync, small.sync))
	cpu := func(c [3]time.Duration) string {
		return fmt.Sprintf("%.1f / %.1f / %.1f", c[0].Seconds(), c[1].Seconds(), c[2].Seconds())
	}
	fmt.Printf("| CPU seconds during that sync: hub / collectors / apiservers and etcd | %s | %s | |\n", cpu(small.syncCPU), cpu(wide.syncCPU))
	fmt.Printf("| hub RSS steady (%s without a change) / peak (MB) | %.0f / %.0f | %.0f / %.0f | %.2fx |\n", cfg.quiet, small.rssSteadyMB, small.rssPeakMB, wide.rssSteadyMB, wide.rssPeakMB, wide.rssSteadyMB/small.rssSteadyMB)
	fmt.Printf("| of the steady RSS: anonymous / file-backed (MB) | %.0f / %.0f | %.0f / %.0f | %.2fx |\n", small.rssAnonMB, small.rssFileMB, wide.rssAnonMB, wide.rssFileMB, wide.rssAnonMB/small.rssAnonMB)
	gm := func(r *result) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f", r.goMem.heapInuse, r.goMem.stacks, r.goMem.unreturned, r.goMem.nextGC)
	}
	fmt.Printf("| of it, Go's heap in use / goroutine stacks / freed heap not yet returned to the OS; the heap at which the next GC is due (MB) | %s | %s | |\n", gm(small), gm(wide))
	fmt.Printf("| Go's live heap after a forced collection (MB) | %.0f | %.0f | %.2f MB per cluster more |\n", small.goMem.liveAfterGC, wide.goMem.liveAfterGC, (wide.goMem.liveAfterGC-small.goMem.liveAfterGC)/float64(len(wide.spec.clusters)-len(small.spec.clusters)))
	if cfg.hubMemory > 0 {
		fmt.Printf("| the cgroup's peak (MB; the hub's memory and its page cache) | %.0f | %.0f | |\n", small.cgroupPeakMB, wide.cgroupPeakMB)
	}
	fmt.Printf("| hub RSS right after the registry change (MB) | %.0f | %.0f | |\n", small.rssBusyMB, wide.rssBusyMB)
	fmt.Printf("| hub goroutines | %d | %d | %.1f per cluster more |\n", small.goroutines, wide.goroutines, float64(wide.goroutines-small.goroutines)/float64(len(wide.spec.clusters)-len(small.spec.clusters)))
	fmt.Printf("| per-cluster Get p50 / p99 | %s / %s | %s / %s | %s |\n", small.getP50, small.getP99, wide.getP50, wide.getP99, ratio(wide.getP50, small.getP50))
	fmt.Printf("| per-cluster Get p50 / p99 at rest (after the quiet period) | %s / %s | %s / %s | %s |\n", small.getRestP50, small.getRestP99, wide.getRestP50, wide.getRestP99, ratio(wide.getRestP50, small.getRestP50))
	fmt.Printf("| per-cluster list of %d Pods (median) | %s | %s | %s |\n", cfg.objects, small.list, wide.list, ratio(wide.list, small.list))
	fmt.Printf("| kubectl get pods -A -l tier=target (%d rows, median) | %s | %s | %s |\n", wide.kubectlRows, small.kubectl, wide.kubectl, ratio(wide.kubectl, small.kubectl))
	fmt.Printf("| a list's resourceVersion (bytes) | %d | %d | |\n", small.listRVBytes, wide.listRVBytes)
	fmt.Printf("| a MODIFIED watch event (bytes; its resourceVersion) | %d (%d) | %d (%d) | |\n", small.eventBytes, small.eventRVBytes, wide.eventBytes, wide.eventRVBytes)
	fmt.Printf("| a registry change reaching every collector | %s | %s | |\n", small.registryChange.Round(time.Millisecond), wide.registryChange.Round(time.Millisecond))
	fmt.Printf("| CPU seconds during that change: hub / collectors / apiservers and etcd | %s | %s | |\n", cpu(small.registryCPU), cpu(wide.registryCPU))
	sw := func(r *result) string {
		return fmt.Sprintf("%s / %s / %s", r.statusWrites[0].Round(time.Millisecond), r.statusWrites[1].Round(time.Millisecond), r.statusWrites[2].Round(time.Millisecond))
	}
	fmt.Printf("| of that change, the collectors' status reports stored after: p50 / p90 / last | %s | %s | |\n", sw(small), sw(wide))
	fmt.Printf("| hub restart: ready / every cluster synced | %s / %s | %s / %s | |\n", small.restartReady.Round(time.Millisecond), small.restartSynced.Round(time.Millisecond), wide.restartReady.Round(time.Millisecond), wide.restartSynced.Round(time.Millisecond))
}
