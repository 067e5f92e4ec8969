// Command bench-console measures the web console in Debian's headless
// chromium against a real hub (`fleetview serve`, in this process) whose
// Badger holds FV_BENCH_PODS Pods over three clusters, published into the
// clusters' streams as collectors would (internal/benchdata) and applied
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
	"bytes"
	"cmp"
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
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

func startBrowser() (context.Context, func(), error) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		return nil, nil, fmt.Errorf("chromium is required (apt-get install chromium): %w", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 800))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelA()
		return nil, nil, err
	}
	return ctx, func() { cancel(); cancelA() }, nil
}

// poll waits for expr to be truthy. A page still loading has no execution
// context for a moment ("Cannot find context"): that is retried.
func poll[T any](ctx context.Context, timeout time.Duration, expr string) (T, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil || !strings.Contains(err.Error(), "Cannot find context") || time.Now().After(deadline) {
			return v, err
		}
	}
}

func eval[T any](ctx context.Context, expr string) (T, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

type firstPage struct {
	rendered, painted []float64
	rows              int
}

// firstPages opens url and runs its search repeat times (the Search
// button: a fresh list, no cache), recording the page's own timings.
func firstPages(page context.Context, url string, wantRows, repeat int) (firstPage, error) {
	var fp firstPage
	base, err := eval[int](page, `window.fleetview ? window.fleetview.perf.renders.length : 0`)
	if err != nil {
		return fp, err
	}
	if err := chromedp.Do(page, chromedp.Navigate(url)); err != nil {
		return fp, err
	}
	for i := range repeat + 1 { // the first run warms the browser's caches of the assets
		if i > 0 {
			if _, err := eval[chromedp.Void](page, `document.getElementById('search-form').requestSubmit()`); err != nil {
				return fp, err
			}
		}
		cond := fmt.Sprintf(`(() => { const p = window.fleetview && window.fleetview.perf; return p && p.renders.length >= %d && p.lastRender.painted !== null && document.getElementById('error').hidden && p.lastRender; })()`, base+i+1)
		r, err := poll[struct {
			MS      float64 `json:"ms"`
			Painted float64 `json:"painted"`
			Rows    int     `json:"rows"`
		}](page, time.Minute, cond)
		if err != nil {
			text, _ := eval[string](page, `location.href + ' renders=' + JSON.stringify(window.fleetview && window.fleetview.perf.renders) + '\n' + document.body.innerText.slice(0, 1500)`)
			return fp, fmt.Errorf("%w; page: %s", err, text)
		}
		if wantRows > 0 && r.Rows != wantRows {
			return fp, fmt.Errorf("first page has %d rows, want %d", r.Rows, wantRows)
		}
		if i > 0 {
			fp.rendered = append(fp.rendered, r.MS)
			fp.painted = append(fp.painted, r.Painted)
		}
		fp.rows = r.Rows
	}
	return fp, nil
}

// loaf sums the page's long animation frames (> 50 ms) by where their
// time went, in ms.
type loaf struct {
	N      int                `json:"n"`
	MS     float64            `json:"ms"`
	Script float64            `json:"script"`
	RAF    float64            `json:"raf"`
	Layout float64            `json:"layout"`
	By     map[string]float64 `json:"by"`
}

func (f loaf) String() string {
	type kv struct {
		k string
		v float64
	}
	var by []kv
	for k, v := range f.By {
		by = append(by, kv{k, v})
	}
	slices.SortFunc(by, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var top []string
	for _, x := range by[:min(3, len(by))] {
		top = append(top, fmt.Sprintf("%s %.0f", x.k, x.v))
	}
	return fmt.Sprintf("long frames %d, %.0f ms: scripts %.0f, frame callbacks %.0f, style+layout %.0f (scripts by invoker: %s)",
		f.N, f.MS, f.Script, f.RAF, f.Layout, strings.Join(top, "; "))
}

type liveResult struct {
	loaf, idleLoaf                loaf
	gaps, lags, idleGaps          []float64
	longTasks, published, flushes int
	idleLong                      int
	received                      int
	longMs                        float64
	settle                        time.Duration
}

// monitor records, in the page, every frame gap, long tasks, and the
// event loop's lag (a 0 ms timeout sampled every 50 ms).
const monitor = `(() => {
  const m = window.__mon = { gaps: [], lags: [], long: 0, longMs: 0, stop: false, last: performance.now() };
  const frame = (ts) => { m.gaps.push(ts - m.last); m.last = ts; if (!m.stop) requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) { m.long++; m.longMs += e.duration; } }).observe({ type: 'longtask' });
  // Long animation frames (> 50 ms), split by where the time went: scripts
  // (by invoker), the frame's own callbacks (rAF), and style and layout.
  m.loaf = { n: 0, ms: 0, script: 0, raf: 0, layout: 0, by: {} };
  new PerformanceObserver((l) => { for (const e of l.getEntries()) {
    const end = e.startTime + e.duration, f = m.loaf;
    f.n++; f.ms += e.duration;
    if (e.renderStart) f.raf += (e.styleAndLayoutStart || end) - e.renderStart;
    if (e.styleAndLayoutStart) f.layout += end - e.styleAndLayoutStart;
    for (const s of e.scripts) { f.script += s.duration; const k = s.invokerType + ' ' + (s.sourceFunctionName || s.invoker); f.by[k] = (f.by[k] || 0) + s.duration; }
  } }).observe({ type: 'long-animation-frame' });
  const lag = () => { if (m.stop) return; const t = performance.now(); setTimeout(() => { m.lags.push(performance.now() - t); setTimeout(lag, 50); }, 0); };
  lag();
  return true;
})()`

func liveRows(ctx context.Context, page context.Context, console string, js jetstream.JetStream, cfg config) (liveResult, error) {
	var lr liveResult
	if err := chromedp.Do(page, chromedp.Navigate(console+"#/search?kind=core%2Fv1%2Fpods&limit=1000")); err != nil {
		return lr, err
	}
	rows, err := poll[[]string](page, time.Minute, `(() => { const r = [...document.querySelectorAll('#results tbody tr')]; return r.length === 1000 && document.getElementById('live').classList.contains('on') && r.map(tr => tr.cells[0].textContent + ' ' + tr.cells[3].textContent); })()`)
	if err != nil {
		return lr, err
	}
	type target struct {
		cluster string
		i       int
	}
	var targets []target
	for _, r := range rows {
		c, name, _ := strings.Cut(r, " ")
		parts := strings.Split(name, "-") // benchdata.PodName: app-%07d-x%d
		i, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil {
			return lr, fmt.Errorf("row %q is not a benchdata Pod", r)
		}
		targets = append(targets, target{c, i})
	}
	// Baseline: the same page with no events, as long as the load runs.
	if _, err := eval[bool](page, monitor); err != nil {
		return lr, err
	}
	select {
	case <-ctx.Done():
		return lr, ctx.Err()
	case <-time.After(time.Duration(cfg.seconds) * time.Second):
	}
	idle, err := eval[struct {
		Gaps []float64 `json:"gaps"`
		Long int       `json:"long"`
		Loaf loaf      `json:"loaf"`
	}](page, `(() => { const m = window.__mon; m.stop = true; return { gaps: m.gaps, long: m.long, loaf: m.loaf }; })()`)
	if err != nil {
		return lr, err
	}
	lr.idleGaps, lr.idleLong, lr.idleLoaf = idle.Gaps, idle.Long, idle.Loaf
	base, err := eval[int](page, `window.fleetview.perf.events`)
	if err != nil {
		return lr, err
	}
	if _, err := eval[bool](page, monitor); err != nil {
		return lr, err
	}
	// Publish one event per tick, each relabeling the next row.
	n := cfg.eventsPerSec * cfg.seconds
	tick := time.NewTicker(time.Second / time.Duration(cfg.eventsPerSec))
	defer tick.Stop()
	var lastLabel string
	var lastTarget target
	for k := range n {
		select {
		case <-ctx.Done():
			return lr, ctx.Err()
		case <-tick.C:
		}
		tg := targets[k%len(targets)]
		rv := 2 + k
		ev := benchdata.Event(tg.cluster, tg.i, rv)
		lastLabel = fmt.Sprintf("rev=r%d", rv)
		ev.Object = bytes.Replace(ev.Object, []byte(`"labels":{`), []byte(fmt.Sprintf(`"labels":{"rev":"r%d",`, rv)), 1)
		data, err := stream.Encode(ev)
		if err != nil {
			return lr, err
		}
		if _, err := js.Publish(ctx, stream.ObjectSubject(tg.cluster, benchdata.PodGVR, ev.GetUid()), data); err != nil {
			return lr, err
		}
		lastTarget = tg
	}
	lr.published = n
	done := time.Now()
	want := fmt.Sprintf(`[...document.querySelectorAll('#results tbody tr')].some(tr => tr.cells[0].textContent === %q && tr.cells[3].textContent === %q && tr.cells[5].textContent.includes(%q))`,
		lastTarget.cluster, benchdata.PodName(lastTarget.i), lastLabel)
	if _, err := poll[bool](page, 30*time.Second, fmt.Sprintf(`window.fleetview.perf.events - %d >= %d && %s`, base, n, want)); err != nil {
		got, _ := eval[int](page, `window.fleetview.perf.events`)
		return lr, fmt.Errorf("the page received %d of %d events: %w", got-base, n, err)
	}
	lr.settle = time.Since(done)
	res, err := eval[struct {
		Gaps    []float64 `json:"gaps"`
		Lags    []float64 `json:"lags"`
		Long    int       `json:"long"`
		LongMs  float64   `json:"longMs"`
		Events  int       `json:"events"`
		Flushes int       `json:"flushes"`
		Loaf    loaf      `json:"loaf"`
	}](page, `(() => { const m = window.__mon; m.stop = true; return { gaps: m.gaps, lags: m.lags, long: m.long, longMs: m.longMs, events: window.fleetview.perf.events, flushes: window.fleetview.perf.flushes, loaf: m.loaf }; })()`)
	if err != nil {
		return lr, err
	}
	lr.loaf = res.Loaf
	lr.gaps, lr.lags, lr.longTasks, lr.longMs = res.Gaps, res.Lags, res.Long, res.LongMs
	lr.received, lr.flushes = res.Events-base, res.Flushes
	return lr, nil
}

func pctl(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func countOver(v []float64, limit float64) int {
	n := 0
	for _, x := range v {
		if x > limit {
			n++
		}
	}
	return n
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
