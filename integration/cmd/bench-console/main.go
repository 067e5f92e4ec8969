// Command bench-console measures the web console in Debian's headless
// chromium against a real hub (`fleetview serve`, in this process) whose
// Badger holds FV_BENCH_PODS Pods over three clusters, published into the
// clusters' streams as collectors would (internal/testing/benchdata) and applied
// by the real materializer:
//
//  1. the first page of a Pod list (100 rows) and of a free-text search,
//     from the search's start to the frame that shows the rows, measured
//     in the page with performance.now(), FV_BENCH_REPEAT times each;
//  2. a page of 1,000 live rows while FV_BENCH_EVENTS_PER_SEC of them
//     change (a label each) per second for FV_BENCH_SECONDS, through the
//     real watch path: frame gaps (requestAnimationFrame), long tasks,
//     event-loop lag, and that every event reached the page.
//
// Defaults are the issue's: FV_BENCH_PODS=150000 FV_BENCH_REPEAT=10
// FV_BENCH_EVENTS_PER_SEC=100 FV_BENCH_SECONDS=20. docs/benchmarks/console.md
// records the figures.
//
// Run from the repository root: go run ./integration/cmd/bench-console
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var clusters = []string{"bench-1", "bench-2", "bench-3"}

type config struct{ pods, repeat, eventsPerSec, seconds int }

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, v)
	}
	return n, nil
}

func main() {
	var cfg config
	var errs []error
	for _, e := range []struct {
		p    *int
		name string
		def  int
	}{{&cfg.pods, "FV_BENCH_PODS", 150000}, {&cfg.repeat, "FV_BENCH_REPEAT", 10}, {&cfg.eventsPerSec, "FV_BENCH_EVENTS_PER_SEC", 100}, {&cfg.seconds, "FV_BENCH_SECONDS", 20}} {
		n, err := envInt(e.name, e.def)
		errs = append(errs, err)
		*e.p = n
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-console:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

func run(ctx context.Context, cfg config) error {
	work, err := os.MkdirTemp("", "bench-console-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(work, "nats"), Port: -1})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	// The Pods, spread over the clusters, as the collectors publish them.
	per := cfg.pods / len(clusters)
	total := per * len(clusters)
	logf("publishing %d Pods into %d cluster streams", total, len(clusters))
	pub, err := benchdata.NewPublisher(nc)
	if err != nil {
		return err
	}
	for _, c := range clusters {
		if err := benchdata.EnsureStream(ctx, js, c); err != nil {
			return err
		}
		if _, err := pub.Publish(ctx, func(yield func(*fleetviewv1.ResourceEvent) bool) {
			for i := range per {
				if !yield(benchdata.Event(c, i, 1)) {
					return
				}
			}
		}); err != nil {
			return err
		}
	}

	// The hub: `fleetview serve` in this process.
	httpAddr, grpcAddr := freeAddr(), freeAddr()
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- app.RunServe(sctx, app.ServeOptions{StateDir: filepath.Join(work, "state"), HTTPAddr: httpAddr, GRPCAddr: grpcAddr,
			NATSClientOptions: app.NATSClientOptions{NATSURL: ns.ClientURL()}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			logf("serve: %v", err)
		}
	}()
	base := "http://" + httpAddr
	t0 := time.Now()
	if err := waitCount(ctx, base, total, served); err != nil {
		return err
	}
	logf("hub holds %d Pods (applied in %s)", total, time.Since(t0).Round(time.Second))

	page, closeBrowser, err := startBrowser()
	if err != nil {
		return err
	}
	defer closeBrowser()
	console := base + "/console/"

	list, err := firstPages(page, console+"#/search?kind=core%2Fv1%2Fpods&limit=100", 100, cfg.repeat)
	if err != nil {
		return fmt.Errorf("list first page: %w", err)
	}
	search, err := firstPages(page, console+"#/search?q=web-00001&kind=core%2Fv1%2Fpods&limit=100", 0, cfg.repeat)
	if err != nil {
		return fmt.Errorf("search first page: %w", err)
	}
	frequent, err := firstPages(page, console+"#/search?q=team-07&kind=core%2Fv1%2Fpods&limit=100", 100, cfg.repeat)
	if err != nil {
		return fmt.Errorf("frequent search first page: %w", err)
	}
	live, err := liveRows(ctx, page, console, js, cfg)
	if err != nil {
		return fmt.Errorf("live rows: %w", err)
	}

	fmt.Printf("\nfleetview console, %d Pods in 3 clusters; %s\n\n", total, machine())
	fmt.Printf("%-58s %10s %10s %10s\n", "first page (search start -> frame showing the rows)", "median", "p90", "max")
	for _, r := range []struct {
		name string
		ms   []float64
	}{{fmt.Sprintf("list 100 Pods of %d, fetch+render (ms)", total), list.rendered}, {fmt.Sprintf("list 100 Pods of %d, to painted frame (ms)", total), list.painted},
		{"free-text search 'web-00001' (rare), fetch+render (ms)", search.rendered}, {"free-text search 'web-00001' (rare), to painted (ms)", search.painted},
		{"free-text search 'team-07' (frequent), fetch+render (ms)", frequent.rendered}, {"free-text search 'team-07' (frequent), to painted (ms)", frequent.painted}} {
		fmt.Printf("%-58s %10.1f %10.1f %10.1f\n", r.name, pctl(r.ms, 0.5), pctl(r.ms, 0.9), pctl(r.ms, 1))
	}
	fmt.Printf("(rows in the rare search's first page: %d; the frequent one's: %d)\n\n", search.rows, frequent.rows)
	fmt.Printf("1,000 live rows, %d events/s for %ds (%d published, %d received by the page, %d batched frames)\n", cfg.eventsPerSec, cfg.seconds, live.published, live.received, live.flushes)
	fmt.Printf("  frames %d (%.1f fps), frame gap median %.1f ms, p99 %.1f ms, max %.1f ms, gaps > 50 ms: %d\n",
		len(live.gaps), float64(len(live.gaps))/float64(cfg.seconds), pctl(live.gaps, 0.5), pctl(live.gaps, 0.99), pctl(live.gaps, 1), countOver(live.gaps, 50))
	fmt.Printf("  long tasks (> 50 ms) %d, %.0f ms in all; event-loop lag median %.1f ms, max %.1f ms\n", live.longTasks, live.longMs, pctl(live.lags, 0.5), pctl(live.lags, 1))
	fmt.Printf("  baseline, same page without events for %ds: frames %d (%.1f fps), gap median %.1f ms, p99 %.1f ms, max %.1f ms, gaps > 50 ms: %d, long tasks %d\n",
		cfg.seconds, len(live.idleGaps), float64(len(live.idleGaps))/float64(cfg.seconds), pctl(live.idleGaps, 0.5), pctl(live.idleGaps, 0.99), pctl(live.idleGaps, 1), countOver(live.idleGaps, 50), live.idleLong)
	fmt.Printf("  live: %s\n  idle: %s\n", live.loaf, live.idleLoaf)
	fmt.Printf("  change -> page: every published event's label is in the page %s after the last publish\n", live.settle.Round(time.Millisecond))
	return nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitCount waits until the hub lists want Pods.
func waitCount(ctx context.Context, base string, want int, served <-chan error) error {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		var resp struct {
			Items              []json.RawMessage `json:"items"`
			RemainingItemCount int               `json:"remainingItemCount,string"` // int64 as a JSON string, as Kubernetes writes it
		}
		if err := getJSON(base+"/v1/resources/core/v1/pods?limit=1", &resp); err == nil && len(resp.Items)+resp.RemainingItemCount >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hub did not list %d Pods within 30 minutes", want)
		}
	}
}

func getJSON(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// machine names the CPU, its cores and the load, since the machines are
// shared.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, model, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	ver := ""
	if out, err := exec.Command("chromium", "--version").Output(); err == nil {
		ver = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%s, %d cores, load %s, %s", model, runtime.NumCPU(), load, ver)
}
