// Command bench-natsfloor measures what the NATS server itself holds for
// each member cluster, with nothing of fleetview's hub around it: the
// floor under the fleet benchmark's per-cluster memory (docs/benchmarks/
// fleet.md, "What nats-server holds per cluster").
//
// Each layout runs an embedded server (internal/natsserver, as the hub
// starts it) in a child process of its own, so the Go heap and goroutines
// it reports are the server's alone. This process plays the fleet over
// TCP: it creates the streams and one durable pull consumer per stream
// with the materializer's settings, connects one collector per cluster
// (with its own credentials where the layout has accounts), publishes
// FV_FLOOR_OBJECTS objects per cluster, consumes and acknowledges every
// one, and waits FV_FLOOR_QUIET (beyond the server's 10-s block cache
// expiry) before the child collects and reports. The layouts:
//
//   - accounts, stream each: fleetview's (an account per cluster with its
//     imports, permissions and guard; a stream and a consumer per cluster);
//   - one account, stream each: no per-cluster accounts (no isolation of
//     replies: accounts.go);
//   - accounts, shared stream: per-cluster accounts importing into one
//     stream (no per-cluster byte quota);
//   - one account, shared stream: neither.
//
// Every layout is measured at FV_FLOOR_BASE clusters and at
// FV_FLOOR_CLUSTERS; the difference divided by the clusters added is the
// cost of one cluster. FV_FLOOR_PROFILE_DIR, when set, receives each
// server's heap profile at the measure (<layout>-<clusters>.heap.pprof).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
)

const (
	hubPassword  = "bench-natsfloor-hub-secret-0123456789"
	token        = "bench-natsfloor-token-0123456789"
	payloadBytes = 1024
)

// layout is one way to lay the fleet out on the server.
type layout struct {
	name     string
	slug     string // names its profiles
	accounts bool   // an account per cluster (natsserver's accounts and guard)
	shared   bool   // one stream for every cluster
}

func layouts() []layout {
	return []layout{
		{"accounts, stream each (fleetview)", "accounts-streams", true, false},
		{"one account, stream each", "account-streams", false, false},
		{"accounts, shared stream", "accounts-stream", true, true},
		{"one account, shared stream", "account-stream", false, true},
	}
}

// usage is what the child reports after collecting.
type usage struct {
	HeapAlloc  uint64 `json:"heapAlloc"`
	StackInuse uint64 `json:"stackInuse"`
	Goroutines int    `json:"goroutines"`
	RSSMB      float64
}

func main() {
	if len(os.Args) == 5 && os.Args[1] == "serve" {
		if err := serve(os.Args[2], os.Args[3], os.Args[4]); err != nil {
			fmt.Fprintln(os.Stderr, "bench-natsfloor serve:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-natsfloor:", err)
		os.Exit(1)
	}
}

type config struct {
	base, clusters, objects int
	quiet                   time.Duration
}

func run() error {
	cfg := config{
		base:     benchutil.EnvInt("FV_FLOOR_BASE", 10),
		clusters: benchutil.EnvInt("FV_FLOOR_CLUSTERS", 300),
		objects:  benchutil.EnvInt("FV_FLOOR_OBJECTS", 20),
		quiet:    15 * time.Second,
	}
	if q := os.Getenv("FV_FLOOR_QUIET"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil {
			return fmt.Errorf("FV_FLOOR_QUIET %q: %w", q, err)
		}
		cfg.quiet = d
	}
	if cfg.clusters <= cfg.base {
		return fmt.Errorf("FV_FLOOR_CLUSTERS (%d) must exceed FV_FLOOR_BASE (%d)", cfg.clusters, cfg.base)
	}
	fmt.Printf("# bench-natsfloor: the NATS server's own cost per member cluster, %d vs %d clusters, %d objects of %d bytes each, measured %s after the last delivery\n\n",
		cfg.base, cfg.clusters, cfg.objects, payloadBytes, cfg.quiet)
	// The layouts run at once, each on servers of its own: what each
	// measures is its own process's memory, and their waits overlap. Each
	// holds a connection per cluster in this process, so as many at once
	// as the open-file limit has room for.
	ls := layouts()
	rows := make([]string, len(ls))
	var g errgroup.Group
	g.SetLimit(concurrentLayouts(cfg.clusters, len(ls)))
	for i, l := range ls {
		g.Go(func() error {
			small, err := measure(l, cfg.base, cfg)
			if err != nil {
				return fmt.Errorf("%s, %d clusters: %w", l.name, cfg.base, err)
			}
			large, err := measure(l, cfg.clusters, cfg)
			if err != nil {
				return fmt.Errorf("%s, %d clusters: %w", l.name, cfg.clusters, err)
			}
			added := float64(cfg.clusters - cfg.base)
			heap := (float64(large.HeapAlloc) - float64(small.HeapAlloc)) / added / 1024
			stacks := (float64(large.StackInuse) - float64(small.StackInuse)) / added / 1024
			gor := float64(large.Goroutines-small.Goroutines) / added
			if gor < 2 {
				// Every layout holds a connection (2 goroutines) per
				// cluster: less means the measure missed the fleet.
				return fmt.Errorf("%s: %.2f goroutines per cluster, under the 2 of its connection", l.name, gor)
			}
			rows[i] = fmt.Sprintf("| %s | %.1f | %.1f | %.2f | %.0f | %.0f |", l.name, heap, stacks, gor, (heap+stacks)*2000/1024, large.RSSMB)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	fmt.Println("| layout | live heap per cluster (KB) | goroutine stacks per cluster (KB) | goroutines per cluster | at 2,000 clusters: heap + stacks (MB) | RSS at the larger fleet (MB) |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
	return nil
}

// concurrentLayouts is how many layouts of clusters may run at once
// within this process's open-file limit (Go raises the soft limit to the
// hard one at start), at least one and at most n.
func concurrentLayouts(clusters, n int) int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == ^uint64(0) {
		return n
	}
	perLayout := uint64(clusters) + 64 // the collectors, the hub's connection, the child's pipes
	return max(1, min(n, int((r.Cur-min(r.Cur, 256))/perLayout)))
}

// measure lays n clusters out as l on a fresh server in a child process
// and returns what the child holds once they are quiet.
func measure(l layout, n int, cfg config) (usage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "fv-natsfloor-")
	if err != nil {
		return usage{}, err
	}
	defer os.RemoveAll(dir)
	mode := "token"
	if l.accounts {
		mode = "accounts"
	}
	self, err := os.Executable()
	if err != nil {
		return usage{}, err
	}
	cmd := exec.CommandContext(ctx, self, "serve", mode, strconv.Itoa(n), l.slug)
	cmd.Env = append(os.Environ(), "FV_FLOOR_DIR="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return usage{}, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return usage{}, err
	}
	if err := cmd.Start(); err != nil {
		return usage{}, err
	}
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	out := bufio.NewScanner(outPipe)
	if !out.Scan() {
		return usage{}, fmt.Errorf("the server process printed no address: %v", out.Err())
	}
	var url string
	var store int64
	if _, err := fmt.Sscanf(out.Text(), "READY %s %d", &url, &store); err != nil {
		return usage{}, fmt.Errorf("the server process printed %q, not its address and store: %w", out.Text(), err)
	}
	// Each stream's quota as `up` sets it for n clusters on this store:
	// it also decides the stream's block size, so what a block holds.
	quota, err := natsserver.StreamQuota(stream.DefaultMaxBytes, n, store)
	if err != nil {
		return usage{}, err
	}
	benchutil.Logf("%s: %d clusters on %s", l.name, n, url)

	hubOpts := []nats.Option{nats.Token(token)}
	if l.accounts {
		hubOpts = []nats.Option{nats.UserInfo(natsserver.HubUser, hubPassword)}
	}
	hub, err := nats.Connect(url, hubOpts...)
	if err != nil {
		return usage{}, err
	}
	defer hub.Close()
	js, err := jetstream.New(hub)
	if err != nil {
		return usage{}, err
	}
	names := clusterNames(n)
	var delivered atomic.Int64
	streams := names
	if l.shared {
		streams = []string{"shared"}
	}
	for _, s := range streams {
		sc := stream.StreamConfig(s, 1, quota)
		if l.shared {
			sc.Subjects = []string{natsnames.SubjectRoot + ".obj.>", natsnames.SubjectRoot + ".ctl.>"}
			sc.MaxBytes = int64(n) * quota
		}
		st, err := js.CreateStream(ctx, sc)
		if err != nil {
			return usage{}, fmt.Errorf("stream %s: %w", sc.Name, err)
		}
		// A 2,000-cluster fleet's batch (materializer.batchFor's floor).
		cons, err := st.CreateOrUpdateConsumer(ctx, materializer.ConsumerConfig("fleetview-badger", 16))
		if err != nil {
			return usage{}, fmt.Errorf("consumer on %s: %w", sc.Name, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if m.Ack() == nil {
				delivered.Add(1)
			}
		})
		if err != nil {
			return usage{}, err
		}
		defer cc.Stop()
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	payload := bytes.Repeat([]byte("x"), payloadBytes)
	for _, c := range names {
		opts := []nats.Option{nats.Token(token)}
		if l.accounts {
			opts = natsserver.ClusterUser{Cluster: c, Password: clusterPassword(c)}.ClientOptions()
		}
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return usage{}, fmt.Errorf("collector of %s: %w", c, err)
		}
		defer nc.Close()
		var cjs jetstream.JetStream
		if l.accounts {
			// What a collector keeps subscribed: the registries' republish
			// and its cluster's requests (internal/relay).
			for _, subj := range []string{natsnames.RegistryUpdates, natsnames.ActRequestTree(c)} {
				if _, err := nc.Subscribe(subj, func(*nats.Msg) {}); err != nil {
					return usage{}, err
				}
			}
			cjs, err = jetstream.NewWithAPIPrefix(nc, natsserver.APIPrefix)
		} else {
			cjs, err = jetstream.New(nc)
		}
		if err != nil {
			return usage{}, err
		}
		for i := range cfg.objects {
			if _, err := cjs.PublishAsync(stream.ObjectSubject(c, pods, fmt.Sprintf("uid-%06d", i)), payload); err != nil {
				return usage{}, err
			}
		}
		select {
		case <-cjs.PublishAsyncComplete():
		case <-ctx.Done():
			return usage{}, ctx.Err()
		}
	}
	want := int64(n * cfg.objects)
	if err := benchutil.WaitFor(ctx, 10*time.Minute, 100*time.Millisecond, "every object delivered", func() error {
		if got := delivered.Load(); got < want {
			return fmt.Errorf("%d of %d delivered", got, want)
		}
		return nil
	}); err != nil {
		return usage{}, err
	}
	time.Sleep(cfg.quiet) // the measure is of the fleet at rest: NATS drops a block's cache 10 s after its last use
	if _, err := fmt.Fprintln(in, "measure"); err != nil {
		return usage{}, err
	}
	if !out.Scan() {
		return usage{}, fmt.Errorf("the server process did not report: %v", out.Err())
	}
	var u usage
	if err := json.Unmarshal(out.Bytes(), &u); err != nil {
		return usage{}, fmt.Errorf("the server's report %q: %w", out.Text(), err)
	}
	u.RSSMB = benchutil.ProcMB(cmd.Process.Pid, "VmRSS:")
	return u, nil
}

func clusterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%04d", i)
	}
	return out
}

func clusterPassword(cluster string) string { return cluster + "-bench-natsfloor-secret" }

// serve runs the server of one layout (mode "accounts" or "token"; slug
// names its profile) for n clusters in this process, prints its address, and on each "measure"
// line collects and prints what the process holds.
func serve(mode, count, slug string) error {
	n, err := strconv.Atoi(count)
	if err != nil {
		return fmt.Errorf("cluster count %q: %w", count, err)
	}
	o := natsserver.Options{StoreDir: os.Getenv("FV_FLOOR_DIR"), Port: -1}
	switch mode {
	case "accounts":
		o.HubPassword = hubPassword
		for _, c := range clusterNames(n) {
			o.Clusters = append(o.Clusters, natsserver.ClusterUser{Cluster: c, Password: clusterPassword(c)})
		}
	case "token":
		o.Token = token
	default:
		return fmt.Errorf("mode %q: want accounts or token", mode)
	}
	s, err := natsserver.Start(o)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	fmt.Printf("READY %s %d\n", s.ClientURL(), s.StoreBytes())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "measure" {
			return fmt.Errorf("command %q: want measure", in.Text())
		}
		runtime.GC()
		debug.FreeOSMemory()
		if dir := os.Getenv("FV_FLOOR_PROFILE_DIR"); dir != "" {
			if err := writeHeapProfile(filepath.Join(dir, fmt.Sprintf("%s-%d.heap.pprof", slug, n))); err != nil {
				return err
			}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b, err := json.Marshal(usage{HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, Goroutines: runtime.NumGoroutine()})
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return in.Err()
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
