package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// lateTarget is the issue's: a CRD installed in a member is synced within it.
const lateTarget = 10 * time.Second

// avg is the mean of f over the members of s.
func (s snapshot) avg(f func(member) float64) float64 {
	sum := 0.0
	for _, m := range s.members {
		sum += f(m)
	}
	return sum / float64(max(len(s.members), 1))
}

func (s snapshot) objects() int {
	n := 0
	for _, m := range s.members {
		n += m.objects
	}
	return n
}

func printResult(w io.Writer, r *result) {
	cfg, b, e := r.cfg, r.baseline, r.everything
	host, _ := os.Hostname()
	fmt.Fprintf(w, "\neverything benchmark: %d members x (built-in kinds + %d CRDs x %d objects + %d Pods), %s\n",
		cfg.clusters, cfg.crds, cfg.objects, cfg.pods, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %s, %d CPUs; load average %s at the start, %s at the end\n\n", host, runtime.NumCPU(), r.loadBefore, r.loadDone)

	type row struct {
		label string
		f     func(p *phase) float64
		unit  string
	}
	rows := []row{
		{"registry applied → /readyz/clusters 200 (every kind synced)", func(p *phase) float64 { return p.synced.Seconds() }, "%.1f s"},
		{"objects cached (the collectors' fleetview_collector_objects, all members)", func(p *phase) float64 { return float64(p.after.objects()) }, "%.0f"},
		{"hub RSS before the registry (collectors connected)", func(p *phase) float64 { return p.idle.hubRSSMB }, "%.0f MiB"},
		{"hub RSS steady (synced, then idle)", func(p *phase) float64 { return p.after.hubRSSMB }, "%.0f MiB"},
		{"hub RSS peak (VmHWM)", func(p *phase) float64 { return p.after.hubPeakMB }, "%.0f MiB"},
		{"hub goroutines before / steady", nil, ""},
		{"per member: kinds synced (resources a collector tracks)", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return float64(m.resources) }) }, "%.1f"},
		{"per member: collector goroutines before the registry", func(p *phase) float64 { return p.idle.avg(func(m member) float64 { return float64(m.goroutines) }) }, "%.0f"},
		{"per member: collector goroutines steady", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return float64(m.goroutines) }) }, "%.0f"},
		{"per member: collector RSS before the registry", func(p *phase) float64 { return p.idle.avg(func(m member) float64 { return m.rssMB }) }, "%.0f MiB"},
		{"per member: collector RSS steady", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return m.rssMB }) }, "%.0f MiB"},
		{"per member: collector live heap before the registry / steady (after a collection)", nil, ""},
		{"per member: collector RSS peak (VmHWM)", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return m.peakMB }) }, "%.0f MiB"},
		{"per member: the apiserver's WATCH requests before the registry", func(p *phase) float64 { return p.idle.avg(func(m member) float64 { return float64(m.watches) }) }, "%.0f"},
		{"per member: the apiserver's WATCH requests steady", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return float64(m.watches) }) }, "%.0f"},
		{"per member: the collector's TCP connections to its apiserver, steady", func(p *phase) float64 { return p.after.avg(func(m member) float64 { return float64(m.conns) }) }, "%.0f"},
	}
	fmt.Fprintf(w, "| measured (per member: the mean of %d) | baseline: Pods only | everything: `*` | difference |\n|---|---|---|---|\n", cfg.clusters)
	for _, rw := range rows {
		if rw.f == nil && strings.Contains(rw.label, "live heap") {
			hp := func(p *phase) (float64, float64) {
				return p.idle.avg(func(m member) float64 { return m.heapMB }), p.after.avg(func(m member) float64 { return m.heapMB })
			}
			bi, ba := hp(b)
			ei, ea := hp(e)
			fmt.Fprintf(w, "| %s | %.1f / %.1f MiB | %.1f / %.1f MiB | +%.1f MiB |\n", rw.label, bi, ba, ei, ea, ea-ba)
			continue
		}
		if rw.f == nil {
			fmt.Fprintf(w, "| %s | %d / %d | %d / %d | +%d |\n", rw.label, b.idle.hubGoroutines, b.after.hubGoroutines,
				e.idle.hubGoroutines, e.after.hubGoroutines, e.after.hubGoroutines-b.after.hubGoroutines)
			continue
		}
		fmt.Fprintf(w, "| %s | "+rw.unit+" | "+rw.unit+" | "+rw.unit+" |\n", rw.label, rw.f(b), rw.f(e), rw.f(e)-rw.f(b))
	}

	// The cost of a kind: what the wildcard's extra kinds added, per kind
	// and member; the collector's memory includes those kinds' objects.
	kinds := e.after.avg(func(m member) float64 { return float64(m.resources) }) - b.after.avg(func(m member) float64 { return float64(m.resources) })
	per := func(f func(member) float64) float64 { return (e.after.avg(f) - b.after.avg(f)) / max(kinds, 1) }
	extraObjects := float64(e.after.objects()-b.after.objects()) / float64(cfg.clusters)
	fmt.Fprintf(w, "\n| cost of a kind per cluster (everything - baseline, over the %.0f kinds the wildcard added per member) | |\n|---|---|\n", kinds)
	fmt.Fprintf(w, "| collector goroutines | %.2f |\n", per(func(m member) float64 { return float64(m.goroutines) }))
	fmt.Fprintf(w, "| watches (the member apiserver's WATCH requests; HTTP/2 streams) | %.2f |\n", per(func(m member) float64 { return float64(m.watches) }))
	fmt.Fprintf(w, "| TCP connections to the member apiserver | %.2f |\n", per(func(m member) float64 { return float64(m.conns) }))
	fmt.Fprintf(w, "| collector RSS (includes the %.0f objects of those kinds per member) | %.2f MiB |\n", extraObjects, per(func(m member) float64 { return m.rssMB }))
	heap := func(p *phase) float64 { return p.after.avg(func(m member) float64 { return m.heapMB }) }
	// A Pod's share of the collector's heap, at the baseline, stands for
	// any object's: what is left of the difference is the kinds'.
	perPod := (heap(b) - b.idle.avg(func(m member) float64 { return m.heapMB })) / max(float64(b.after.objects())/float64(cfg.clusters), 1)
	fmt.Fprintf(w, "| collector live heap (includes those objects) | %.3f MiB |\n", (heap(e)-heap(b))/max(kinds, 1))
	fmt.Fprintf(w, "| collector live heap without the objects' share (%.0f B per object, the baseline's Pods) | %.3f MiB |\n",
		perPod*(1<<20), (heap(e)-heap(b)-perPod*extraObjects)/max(kinds, 1))
	fmt.Fprintf(w, "| hub goroutines | %.2f |\n", float64(e.after.hubGoroutines-b.after.hubGoroutines)/max(kinds*float64(cfg.clusters), 1))
	fmt.Fprintf(w, "| hub RSS (includes those objects) | %.2f MiB |\n", (e.after.hubRSSMB-b.after.hubRSSMB)/max(kinds*float64(cfg.clusters), 1))

	perObject := func(p *phase) float64 {
		return (p.after.hubRSSMB - p.idle.hubRSSMB) * (1 << 20) / float64(max(p.after.objects(), 1))
	}
	fmt.Fprintf(w, "\n| cost of an object (the hub's RSS steady - before the registry, over the objects cached) | |\n|---|---|\n")
	fmt.Fprintf(w, "| baseline: %d Pods | %.0f B |\n", b.after.objects(), perObject(b))
	fmt.Fprintf(w, "| everything: %d objects | %.0f B |\n", e.after.objects(), perObject(e))
	fmt.Fprintf(w, "| the wildcard's extra %d objects ((everything - baseline) steady RSS) | %.0f B |\n", e.after.objects()-b.after.objects(),
		(e.after.hubRSSMB-b.after.hubRSSMB)*(1<<20)/float64(max(e.after.objects()-b.after.objects(), 1)))

	mark := "met"
	if e.lateCRD > lateTarget {
		mark = "MISSED"
	}
	fmt.Fprintf(w, "\na CRD installed in a member after the sync: its object listed through the hub %s after the CRD's create (target ≤ %s: %s; the collectors read discovery every 5 s)\n",
		e.lateCRD.Round(time.Millisecond), lateTarget, mark)
}
