// Command bench-query measures the query API against what users do without
// fleetview, side by side in one run: real member kube-apiservers (through
// integration/harness) queried in parallel with resourceVersion=0 and the
// answers merged, versus one fleetview (the hub in-process, a collector
// process per cluster) holding the same
// Pods. It prints a table of figures; docs/benchmarks/query.md records them.
//
// Scale comes from the environment (defaults: the issue's):
//
//	FV_BENCH_CLUSTERS=3 FV_BENCH_PODS=50000 (per cluster) FV_BENCH_SELECT_EVERY=10
//	FV_BENCH_REPEAT=5 FV_BENCH_GETS=2000 FV_BENCH_WATCHERS=1000
//	FV_BENCH_EVENTS_PER_SEC=1000 FV_BENCH_WATCH_SECONDS=20
//	FV_BENCH_STRICT_LISTS=1 (the hub's --list-page-policy=strict: the
//	baseline of the kubectl and RSS rows under the list budget)
//	FV_BENCH_KUBECTL_MEMPROFILE=file (heap profiles around the kubectl
//	runs, file.start and file.end: what they allocated in this process)
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi"
	"github.com/fleetview/fleetview/queryapi/kubeapi"
	"github.com/fleetview/fleetview/queryapi/watchhub"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
)

type config struct {
	clusters, pods, selectEvery, repeat, gets, watchers, eventsPerSec, watchSeconds int
	// flush is the materializer's FlushInterval (0: its default).
	flush time.Duration
	// strictLists runs the hub with --list-page-policy=strict
	// (FV_BENCH_STRICT_LISTS=1): the baseline of the kubectl rows and
	// the RSS row under the list budget.
	strictLists bool
}

func flushLabel(cfg config) string {
	if cfg.flush == 0 {
		return "default"
	}
	return cfg.flush.String()
}

func main() {
	if len(os.Args) > 1 {
		child := map[string]func([]string) error{"watchers": watcherProcess, "collector": collectorProcess}[os.Args[1]]
		if child == nil {
			fmt.Fprintf(os.Stderr, "error: unknown subcommand %q\n", os.Args[1])
			os.Exit(2)
		}
		if err := child(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "error: %s process: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	cfg := config{
		clusters: benchutil.EnvInt("FV_BENCH_CLUSTERS", 3), pods: benchutil.EnvInt("FV_BENCH_PODS", 50000), selectEvery: benchutil.EnvInt("FV_BENCH_SELECT_EVERY", 10),
		repeat: benchutil.EnvInt("FV_BENCH_REPEAT", 5), gets: benchutil.EnvInt("FV_BENCH_GETS", 2000), watchers: benchutil.EnvInt("FV_BENCH_WATCHERS", 1000),
		eventsPerSec: benchutil.EnvInt("FV_BENCH_EVENTS_PER_SEC", 1000), watchSeconds: benchutil.EnvInt("FV_BENCH_WATCH_SECONDS", 20),
		strictLists: benchutil.EnvInt("FV_BENCH_STRICT_LISTS", 0) == 1,
	}
	if v := os.Getenv("FV_BENCH_FLUSH_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error: FV_BENCH_FLUSH_INTERVAL:", err)
			os.Exit(2)
		}
		cfg.flush = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func pod(i, selectEvery int) *corev1.Pod {
	app := benchdata.Apps[i%len(benchdata.Apps)]
	sel := "no"
	if i%selectEvery == 0 {
		sel = "yes"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchdata.Namespace(i), Name: benchdata.PodName(i),
			Labels:        map[string]string{"app": app, "sel": sel, "tier": []string{"frontend", "backend"}[i%2]},
			Annotations:   map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
			ManagedFields: managedFields(app)},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%200), ServiceAccountName: app,
			Containers: []corev1.Container{{Name: app, Image: "registry.example.com/" + app + ":1.2.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env:   []corev1.EnvVar{{Name: "APP_ENV", Value: "production"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}},
	}
}

// managedFields are what a member's apiserver records for a Pod its
// ReplicaSet controller created and its kubelet reports on (the Pods are
// stored straight into etcd, where nothing writes them): the member
// serves them in every list and Table row, fleetview's collector drops
// them at the source.
func managedFields(app string) []metav1.ManagedFieldsEntry {
	at := metav1.NewTime(time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC))
	spec := `{"f:metadata":{"f:annotations":{".":{},"f:prometheus.io/port":{},"f:prometheus.io/scrape":{}},"f:labels":{".":{},"f:app":{},"f:sel":{},"f:tier":{}}},` +
		`"f:spec":{"f:containers":{"k:{\"name\":\"` + app + `\"}":{".":{},"f:env":{".":{},"k:{\"name\":\"APP_ENV\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"POD_NAME\"}":{".":{},"f:name":{},"f:valueFrom":{".":{},"f:fieldRef":{}}}},` +
		`"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}},"k:{\"containerPort\":9090,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},` +
		`"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:serviceAccount":{},"f:serviceAccountName":{},"f:terminationGracePeriodSeconds":{}}}`
	status := `{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},` +
		`"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.244.0.1\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`
	return []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(spec)}},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(status)}, Subresource: "status"},
	}
}

func populate(ctx context.Context, c *harness.Cluster, cfg config) error {
	cs := c.Clientset()
	for n := range 50 {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%02d", n)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return c.StorePods(ctx, cfg.pods, 2, func(i int) (*corev1.Pod, error) {
		p := pod(i, cfg.selectEvery)
		harness.DefaultPod(p)
		return p, nil
	})
}

// startProfile writes a CPU profile to path (none when empty) until the
// returned function is called.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); _ = f.Close() }) }, nil
}

func run(ctx context.Context, cfg config) error {
	names := make([]string, cfg.clusters)
	for i := range names {
		names[i] = fmt.Sprintf("member%d", i+1)
	}
	benchutil.Logf("starting %d member clusters", cfg.clusters)
	fleet, err := harness.Start(ctx, harness.Options{Clusters: names})
	if err != nil {
		return err
	}
	defer func() { _ = fleet.Stop() }()
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range fleet.Clusters() {
		if err := c.GrantCollectorReadAll(ctx); err != nil {
			return err
		}
		g.Go(func() error { return populate(gctx, c, cfg) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	total := cfg.clusters * cfg.pods
	benchutil.Logf("created %d pods in %s", total, time.Since(t0).Round(time.Second))

	dir, err := os.MkdirTemp("", "fv-bench-query-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stack, err := startStack(ctx, dir, fleet, cfg)
	if err != nil {
		return err
	}
	defer stack.stop()
	conn, err := grpc.NewClient(stack.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		return err
	}
	defer conn.Close()
	q := fleetviewv1.NewQueryServiceClient(conn)
	regs := fleetviewv1.NewRegistryServiceClient(conn)
	reg, _ := structpb.NewStruct(map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": toAny(names)}, "resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}},
	})
	t1 := time.Now()
	for {
		if _, err = regs.ApplyRegistry(ctx, &fleetviewv1.ApplyRegistryRequest{Registry: reg}); err == nil {
			break
		}
		if time.Since(t1) > time.Minute {
			return fmt.Errorf("apply registry: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		resp, err := q.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 1})
		if err == nil && resp.RemainingItemCount != nil && int(*resp.RemainingItemCount)+1 >= total {
			break
		}
		if time.Since(t1) > 30*time.Minute {
			return fmt.Errorf("fleetview did not ingest %d pods in 30 minutes", total)
		}
		time.Sleep(time.Second)
	}
	benchutil.Logf("fleetview ingested %d pods in %s", total, time.Since(t1).Round(time.Second))
	fv := plainEndpoint(stack.restURL)
	// The Kubernetes API serves what the collectors' inventory reports,
	// which follows their sync by a heartbeat.
	for _, c := range names {
		for {
			_, err := fv.fetch(ctx, "/clusters/"+c+"/api/v1/pods", url.Values{"limit": {"1"}})
			if err == nil {
				break
			}
			if time.Since(t1) > 31*time.Minute {
				return fmt.Errorf("fleetview's Kubernetes API does not serve %s's pods: %w", c, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	eps := make([]endpoint, 0, cfg.clusters)
	var rss []string
	for _, c := range fleet.Clusters() {
		e, err := apiserverEndpoint(c.AdminRESTConfig())
		if err != nil {
			return err
		}
		eps = append(eps, e)
		rss = append(rss, fmt.Sprintf("%s %.0f MB", c.Name, benchutil.ProcMB(c.PID(), "VmRSS:")))
	}
	stopProfile, err := startProfile(os.Getenv("FV_BENCH_LIST_CPUPROFILE"))
	if err != nil {
		return err
	}
	k := kubectls{fleetview: filepath.Join(dir, "fleetview.kubeconfig"), members: filepath.Join(dir, "members.kubeconfig"), contexts: names, cacheDir: filepath.Join(dir, "kubectl-cache")}
	if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: stack.restURL, Output: k.fleetview}, io.Discard); err != nil {
		return err
	}
	if err := fleet.WriteKubeconfig(k.members, "admin"); err != nil {
		return err
	}
	b := &bench{cfg: cfg, total: total, kubectl: k}
	if err := b.lists(ctx, eps, fv, q); err != nil {
		return err
	}
	if err := b.gets(ctx, eps, fv, q, names); err != nil {
		return err
	}
	stopProfile()
	if err := b.watches(ctx, stack.grpcAddr, fv, stack.natsURL, names); err != nil {
		return err
	}
	fmt.Printf("\nfleetview query benchmark: %d clusters x %d pods (%d total), %s\n", cfg.clusters, cfg.pods, total, time.Now().UTC().Format(time.RFC3339))
	if cfg.strictLists {
		fmt.Println("the hub pages lists strictly (FV_BENCH_STRICT_LISTS=1, --list-page-policy=strict): the baseline of the list budget")
	}
	fmt.Printf("kube-apiserver RSS after the load: %s\n", strings.Join(rss, ", "))
	b.print(os.Stdout)
	return nil
}

// stack is fleetview's hub built in-process like `fleetview up` builds it
// (embedded NATS, the Badger materializer feeding the watch hub, the query
// API), so the benchmark can set the materializer's flush interval, with
// one collector process per member cluster.
type stack struct {
	grpcAddr, restURL, natsURL string
	stop                       func()
}

func startStack(ctx context.Context, dir string, fleet *harness.Fleet, cfg config) (*stack, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(dir, "nats"), Port: -1})
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	bk, err := store.OpenBuckets(ctx, nc, 1)
	if err != nil {
		return nil, err
	}
	hub := watchhub.New(watchhub.Options{})
	set, err := store.New(ctx, store.Config{NATS: nc, Buckets: bk,
		StateDir: dir, Default: badger.Kind(badger.KindOptions{FlushInterval: cfg.flush}), Observer: hub.Observe, Logger: log})
	if err != nil {
		return nil, err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	api, err := queryapi.New(queryapi.Config{Reader: set.Reader(), Hub: hub, Registries: bk.Registries, Inventory: bk.Inventory,
		JetStream: bk.JetStream, Applied: set.Applied, GRPCListener: gl, HTTPListener: hl, Logger: log,
		KubeLists: kubeapi.ListPolicy{Strict: cfg.strictLists}})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error { return set.Run(rctx) })
	g.Go(func() error { return api.Run(rctx) })
	// Collectors run as child processes, one per cluster, as they run in
	// their member clusters: their per-object state is not the hub's
	// heap, which its garbage collector would otherwise mark with the rest.
	var cols []*exec.Cmd
	stopCollectors := func() {
		for _, cmd := range cols {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	for _, c := range fleet.Clusters() {
		cmd, err := startCollector(dir, c, ns.ClientURL())
		if err != nil {
			stopCollectors()
			cancel()
			return nil, err
		}
		cols = append(cols, cmd)
	}
	return &stack{grpcAddr: gl.Addr().String(), restURL: "http://" + hl.Addr().String(), natsURL: ns.ClientURL(), stop: func() {
		stopCollectors()
		cancel()
		_ = g.Wait()
		nc.Close()
		ns.Shutdown()
	}}, nil
}

// startCollector runs `bench-query collector` (collectorProcess) for c.
func startCollector(dir string, c *harness.Cluster, natsURL string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ca := ""
	if !c.Insecure {
		ca = filepath.Join(dir, c.Name+"-ca.crt")
		if err := os.WriteFile(ca, c.CAData, 0o600); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(self, "collector", c.Name, c.URL, ca, natsURL)
	cmd.Env = append(os.Environ(), "FV_BENCH_COLLECTOR_TOKEN="+c.CollectorToken)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd, cmd.Start()
}

// collectorProcess is the child side of startCollector (`bench-query
// collector NAME URL CA-FILE NATS-URL`, the token in
// FV_BENCH_COLLECTOR_TOKEN): one cluster's collector until SIGTERM.
func collectorProcess(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: bench-query collector NAME URL CA-FILE NATS-URL")
	}
	name, host, caFile, natsURL := args[0], args[1], args[2], args[3]
	cfg := &rest.Config{Host: host, BearerToken: os.Getenv("FV_BENCH_COLLECTOR_TOKEN"), QPS: 200, Burst: 400}
	if caFile == "" {
		cfg.TLSClientConfig.Insecure = true
	} else {
		cfg.TLSClientConfig.CAFile = caFile
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	col, err := collector.New(collector.Config{Cluster: name, REST: cfg, NATS: nc, Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return col.Run(ctx)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
