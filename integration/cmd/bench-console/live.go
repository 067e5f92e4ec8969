package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

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
