// Command bench-query measures the query API against what users do without
// fleetview, side by side in one run: real member kube-apiservers (through
// integration/harness) queried in parallel with resourceVersion=0 and the
// answers merged, versus one fleetview (`up`, in-process) holding the same
// Pods. It prints a table of figures; docs/benchmarks/query.md records them.
//
// Scale comes from the environment (defaults: the issue's):
//
//	FV_BENCH_CLUSTERS=3 FV_BENCH_PODS=50000 (per cluster) FV_BENCH_SELECT_EVERY=10
//	FV_BENCH_REPEAT=5 FV_BENCH_GETS=2000 FV_BENCH_WATCHERS=1000
//	FV_BENCH_EVENTS_PER_SEC=1000 FV_BENCH_WATCH_SECONDS=20
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/backends"
	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi"
)

type config struct {
	clusters, pods, selectEvery, repeat, gets, watchers, eventsPerSec, watchSeconds int
	// flush is the materializer's FlushInterval (0: its default).
	flush time.Duration
}

func flushLabel(cfg config) string {
	if cfg.flush == 0 {
		return "default"
	}
	return cfg.flush.String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func main() {
	cfg := config{
		clusters: envInt("FV_BENCH_CLUSTERS", 3), pods: envInt("FV_BENCH_PODS", 50000), selectEvery: envInt("FV_BENCH_SELECT_EVERY", 10),
		repeat: envInt("FV_BENCH_REPEAT", 5), gets: envInt("FV_BENCH_GETS", 2000), watchers: envInt("FV_BENCH_WATCHERS", 1000),
		eventsPerSec: envInt("FV_BENCH_EVENTS_PER_SEC", 1000), watchSeconds: envInt("FV_BENCH_WATCH_SECONDS", 20),
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

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

func pod(i, selectEvery int) *corev1.Pod {
	app := benchdata.Apps[i%len(benchdata.Apps)]
	sel := "no"
	if i%selectEvery == 0 {
		sel = "yes"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchdata.Namespace(i), Name: benchdata.PodName(i),
			Labels:      map[string]string{"app": app, "sel": sel, "tier": []string{"frontend", "backend"}[i%2]},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%200), ServiceAccountName: app,
			Containers: []corev1.Container{{Name: app, Image: "registry.example.com/" + app + ":1.2.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env:   []corev1.EnvVar{{Name: "APP_ENV", Value: "production"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}},
	}
}

func populate(ctx context.Context, c *harness.Cluster, cfg config) error {
	cs := c.Clientset()
	for n := range 50 {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%02d", n)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range 32 {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.pods {
					return nil
				}
				p := pod(i, cfg.selectEvery)
				if _, err := cs.CoreV1().Pods(p.Namespace).Create(gctx, p, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("%s: create pod %d: %w", c.Name, i, err)
				}
			}
		})
	}
	return g.Wait()
}

func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

type result struct{ name, fleetview, fanout, ratio string }

func run(ctx context.Context, cfg config) error {
	names := make([]string, cfg.clusters)
	for i := range names {
		names[i] = fmt.Sprintf("member%d", i+1)
	}
	logf("starting %d member clusters", cfg.clusters)
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
	logf("created %d pods in %s", total, time.Since(t0).Round(time.Second))

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
	logf("fleetview ingested %d pods in %s", total, time.Since(t1).Round(time.Second))

	clients := make([]kubernetes.Interface, 0, cfg.clusters)
	var rss []string
	for _, c := range fleet.Clusters() {
		rc := c.AdminRESTConfig()
		rc.QPS, rc.Burst = 1000, 2000
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		clients = append(clients, cs)
		rss = append(rss, fmt.Sprintf("%s %.0f MB", c.Name, rssMB(c.PID())))
	}
	var results []result
	add := func(name string, fv, fo time.Duration) {
		results = append(results, result{name, fv.Round(time.Microsecond).String(), fo.Round(time.Microsecond).String(), fmt.Sprintf("%.2fx", float64(fv)/float64(fo))})
	}

	if p := os.Getenv("FV_BENCH_LIST_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	// (a) label-selected list.
	wantSel := 0
	for i := 0; i < cfg.pods; i++ {
		if i%cfg.selectEvery == 0 {
			wantSel++
		}
	}
	wantSel *= cfg.clusters
	var fvA, rawA, restA, foA []time.Duration
	for range cfg.repeat {
		s := time.Now()
		n, err := fvList(ctx, q, stack.restURL, "sel=yes", 0, "grpc")
		if err != nil {
			return err
		}
		fvA = append(fvA, time.Since(s))
		if n != wantSel {
			return fmt.Errorf("fleetview label list: %d items, want %d", n, wantSel)
		}
		s = time.Now()
		if n, err = fvList(ctx, q, stack.restURL, "sel=yes", 0, "raw"); err != nil || n != wantSel {
			return fmt.Errorf("fleetview raw label list: %d items, want %d: %v", n, wantSel, err)
		}
		rawA = append(rawA, time.Since(s))
		s = time.Now()
		if n, err = fvList(ctx, q, stack.restURL, "sel=yes", 0, "rest"); err != nil || n != wantSel {
			return fmt.Errorf("fleetview REST label list: %d items, want %d: %v", n, wantSel, err)
		}
		restA = append(restA, time.Since(s))
		s = time.Now()
		n, err = fanoutList(ctx, clients, metav1.ListOptions{LabelSelector: "sel=yes", ResourceVersion: "0"})
		if err != nil {
			return err
		}
		foA = append(foA, time.Since(s))
		if n != wantSel {
			return fmt.Errorf("fan-out label list: %d items, want %d", n, wantSel)
		}
	}
	add(fmt.Sprintf("(a) list sel=yes, %d of %d pods, gRPC (Struct items), median of %d", wantSel, total, cfg.repeat), median(fvA), median(foA))
	add("(a) same, gRPC raw JSON items", median(rawA), median(foA))
	add("(a) same, REST", median(restA), median(foA))

	// (b) full list in 500-object pages.
	var fvB, rawB, restB, foB []time.Duration
	for range max(cfg.repeat/2, 1) {
		for _, mode := range []string{"grpc", "raw", "rest"} {
			s := time.Now()
			n, err := fvList(ctx, q, stack.restURL, "", 500, mode)
			if err != nil {
				return err
			}
			d := time.Since(s)
			if n != total {
				return fmt.Errorf("fleetview paged list (%s): %d items, want %d", mode, n, total)
			}
			switch mode {
			case "grpc":
				fvB = append(fvB, d)
			case "raw":
				rawB = append(rawB, d)
			default:
				restB = append(restB, d)
			}
		}
		s := time.Now()
		n, err := fanoutList(ctx, clients, metav1.ListOptions{Limit: 500, ResourceVersion: "0"})
		if err != nil {
			return err
		}
		foB = append(foB, time.Since(s))
		if n != total {
			return fmt.Errorf("fan-out paged list: %d items, want %d", n, total)
		}
	}
	add(fmt.Sprintf("(b) full list of %d pods in 500-object pages, gRPC (Struct items), median of %d", total, len(fvB)), median(fvB), median(foB))
	add("(b) same, gRPC raw JSON items", median(rawB), median(foB))
	add("(b) same, REST", median(restB), median(foB))

	// (c) Get latency, cluster-qualified, random pods.
	var fvC, foC []time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	for range cfg.gets {
		ci, i := rng.IntN(cfg.clusters), rng.IntN(cfg.pods)
		s := time.Now()
		if _, err := q.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: benchdata.Namespace(i), Name: benchdata.PodName(i), Cluster: names[ci]}); err != nil {
			return err
		}
		fvC = append(fvC, time.Since(s))
		s = time.Now()
		if _, err := clients[ci].CoreV1().Pods(benchdata.Namespace(i)).Get(ctx, benchdata.PodName(i), metav1.GetOptions{ResourceVersion: "0"}); err != nil {
			return err
		}
		foC = append(foC, time.Since(s))
	}
	add(fmt.Sprintf("(c) Get p50 (%d gets)", cfg.gets), pct(fvC, 0.5), pct(foC, 0.5))
	add("(c) Get p99", pct(fvC, 0.99), pct(foC, 0.99))

	if os.Getenv("FV_BENCH_LIST_CPUPROFILE") != "" {
		pprof.StopCPUProfile()
	}
	// (d) watchers.
	p50, p99, delivered, err := benchWatch(ctx, q, stack.natsURL, names, cfg)
	if err != nil {
		return err
	}

	fmt.Printf("\nfleetview query benchmark: %d clusters x %d pods (%d total), %s\n", cfg.clusters, cfg.pods, total, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("kube-apiserver RSS after the load: %s\n\n", strings.Join(rss, ", "))
	fmt.Printf("| measurement | fleetview | fan-out to kube-apiservers (rv=0, merged) | fleetview / fan-out |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.fleetview, r.fanout, r.ratio)
	}
	fmt.Printf("| (d) %d watchers (materializer flush interval %s), %d events/s for %ds: delivery latency p50 / p99 (%d deliveries) | %s / %s | n/a | |\n",
		cfg.watchers, flushLabel(cfg), cfg.eventsPerSec, cfg.watchSeconds, delivered, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	return nil
}

// stack is fleetview's serving side built like `fleetview serve` plus
// in-process collectors (embedded NATS, collectors, the Badger
// materializer feeding the watch hub, the query API), so the benchmark can
// set the materializer's flush interval.
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
	bk, err := backends.OpenBuckets(ctx, nc)
	if err != nil {
		return nil, err
	}
	hub := queryapi.NewHub(queryapi.HubOptions{})
	set, err := backends.New(ctx, backends.Config{NATS: nc, Buckets: bk,
		StateDir: dir, FlushInterval: cfg.flush, Observer: hub.Observe, Logger: log})
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
		JetStream: bk.JetStream, Applied: set.Applied, GRPCListener: gl, HTTPListener: hl, Logger: log, WatchBuffer: 1 << 16})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var cg, g errgroup.Group
	for _, c := range fleet.Clusters() {
		col, err := collector.New(collector.Config{Cluster: c.Name, REST: c.CollectorRESTConfig(), NATS: nc, Logger: log})
		if err != nil {
			cancel()
			return nil, err
		}
		cg.Go(func() error { return col.Run(rctx) })
	}
	g.Go(func() error { return set.Run(rctx) })
	g.Go(func() error { return api.Run(rctx) })
	return &stack{grpcAddr: gl.Addr().String(), restURL: "http://" + hl.Addr().String(), natsURL: ns.ClientURL(), stop: func() {
		cancel()
		_ = cg.Wait()
		_ = g.Wait()
		nc.Close()
		ns.Shutdown()
	}}, nil
}

// fvList lists every matching pod from fleetview, paging by limit (0: one
// page), over gRPC with Struct items, gRPC with raw JSON items, or REST.
func fvList(ctx context.Context, q fleetviewv1.QueryServiceClient, restURL, sel string, limit int64, mode string) (int, error) {
	n, cont := 0, ""
	for {
		var next string
		switch mode {
		case "rest":
			u := fmt.Sprintf("%s/v1/resources/core/v1/pods?labelSelector=%s&limit=%d&continue=%s", restURL, url.QueryEscape(sel), limit, url.QueryEscape(cont))
			resp, err := http.Get(u)
			if err != nil {
				return 0, err
			}
			var body struct {
				Items    []json.RawMessage `json:"items"`
				Continue string            `json:"continue"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("REST list: %d %v", resp.StatusCode, err)
			}
			n += len(body.Items)
			next = body.Continue
		default:
			resp, err := q.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: sel, Limit: limit, Continue: cont, Raw: mode == "raw"})
			if err != nil {
				return 0, err
			}
			n += len(resp.GetItems()) + len(resp.GetRawItems())
			next = resp.GetContinue()
		}
		if next == "" {
			return n, nil
		}
		cont = next
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// fanoutList is what users do without fleetview: list every cluster in
// parallel (paging when Limit is set) and merge in one sorted answer.
func fanoutList(ctx context.Context, clients []kubernetes.Interface, lo metav1.ListOptions) (int, error) {
	res := make([][]corev1.Pod, len(clients))
	g, gctx := errgroup.WithContext(ctx)
	for i, cs := range clients {
		g.Go(func() error {
			o := lo
			for {
				l, err := cs.CoreV1().Pods("").List(gctx, o)
				if err != nil {
					return err
				}
				res[i] = append(res[i], l.Items...)
				if l.Continue == "" {
					return nil
				}
				o.Continue, o.ResourceVersion = l.Continue, ""
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	var all []corev1.Pod
	for _, r := range res {
		all = append(all, r...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Namespace != all[j].Namespace {
			return all[i].Namespace < all[j].Namespace
		}
		return all[i].Name < all[j].Name
	})
	return len(all), nil
}

// benchWatch opens the watchers (each selecting one of 100 label values,
// so every event reaches watchers/100 of them), injects events straight
// into the cluster streams at the given rate, and measures the time from
// publish to delivery to each watcher.
func benchWatch(ctx context.Context, q fleetviewv1.QueryServiceClient, natsURL string, names []string, cfg config) (time.Duration, time.Duration, int, error) {
	const groups = 100
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var watchErrs atomic.Int64
	var wg sync.WaitGroup
	for w := range cfg.watchers {
		ws, err := q.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: "bench-watch", LabelSelector: fmt.Sprintf("grp=g%d", w%groups)})
		if err != nil {
			return 0, 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := ws.Recv()
				if err != nil {
					if wctx.Err() == nil {
						watchErrs.Add(1)
						logf("watch ended: %v", err)
					}
					return
				}
				now := time.Now()
				ann := ev.GetObject().GetFields()["metadata"].GetStructValue().GetFields()["annotations"].GetStructValue().GetFields()
				sent, err := strconv.ParseInt(ann["bench/sent"].GetStringValue(), 10, 64)
				if err != nil {
					continue
				}
				mu.Lock()
				lat = append(lat, now.Sub(time.Unix(0, sent)))
				mu.Unlock()
			}
		}()
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, 0, err
	}
	// Let every watch subscribe before the clock starts.
	time.Sleep(2 * time.Second)
	logf("%d watchers open; injecting %d events/s for %ds", cfg.watchers, cfg.eventsPerSec, cfg.watchSeconds)
	if p := os.Getenv("FV_BENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick := max(cfg.eventsPerSec/100, 1)
	end := time.Now().Add(time.Duration(cfg.watchSeconds) * time.Second)
	n := 0
	for time.Now().Before(end) {
		<-tick.C
		for range perTick {
			c := names[n%len(names)]
			i := n % 5000
			uid := fmt.Sprintf("bench-%s-%d", c, i)
			obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-%d","namespace":"bench-watch","uid":%q,"resourceVersion":"%d","labels":{"grp":"g%d"},"annotations":{"bench/sent":"%d","fleetview.io/cluster":%q,"resource.karmada.io/cached-from-cluster":%q}},"spec":{"nodeName":"node-1"},"status":{"phase":"Running"}}`,
				i, uid, n, i%groups, time.Now().UnixNano(), c, c)
			ev := &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(benchdata.PodGVR), Kind: "Pod", Uid: uid, Namespace: "bench-watch",
				Name: fmt.Sprintf("w-%d", i), ResourceVersion: strconv.Itoa(n), Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT,
				Object: []byte(obj), ObservedUnixNano: time.Now().UnixNano(), Namespaced: true}
			data, err := stream.Encode(ev)
			if err != nil {
				return 0, 0, 0, err
			}
			if _, err := js.PublishAsync(stream.ObjectSubject(c, benchdata.PodGVR, uid), data); err != nil {
				return 0, 0, 0, err
			}
			n++
		}
	}
	<-js.PublishAsyncComplete()
	want := n * cfg.watchers / groups
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		if got >= want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n := watchErrs.Load(); n > 0 {
		return 0, 0, 0, fmt.Errorf("%d watches ended with an error", n)
	}
	if len(lat) < want {
		logf("warning: %d of %d expected deliveries arrived", len(lat), want)
	}
	if len(lat) == 0 {
		return 0, 0, 0, fmt.Errorf("no watch event delivered")
	}
	return pct(lat, 0.5), pct(lat, 0.99), len(lat), nil
}
