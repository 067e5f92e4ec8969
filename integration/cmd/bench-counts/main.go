// Command bench-counts measures counts against the list of the same
// selection, and the apply rate with the value index against without it,
// in one run, on the Badger store itself (no NATS, no members: what is
// measured is the store's read and write paths):
//
//  1. N Pods (~3 KB, benchdata's, with four phases and one or two images)
//     spread over FV_COUNTS_CLUSTERS clusters are applied, in batches of
//     1,000, into a store with the value index and into one without it,
//     alternating FV_COUNTS_ROUNDS times; then a third of them change
//     phase (an update pass), the same way. Apply rates and their ratio.
//  2. On the indexed store: counts by cluster x status.phase, by image,
//     by cluster with app=web, by namespace x label:app, and the list of
//     the same selection (every page of 500, the baseline), each the
//     median of FV_COUNTS_REPEAT runs, and their ratio.
//
// Scale: FV_COUNTS_PODS=150000 (the 3 x 50k), FV_COUNTS_CLUSTERS=3,
// FV_COUNTS_ROUNDS=2, FV_COUNTS_REPEAT=5. It exits 1 when a count exceeds
// its target (cluster x phase 100 ms, image 200 ms, at any scale: smaller
// scales only make it easier), or a count disagrees with the list. The
// apply ratios are reported, not judged: on a shared 2-core machine two
// runs of the same arm differ by more than the index costs.
//
// Run: go run ./integration/cmd/bench-counts
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/badger"
)

var phases = []string{"Running", "Pending", "Succeeded", "Failed"}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// pod is benchdata's Pod i with a phase and, for a third, an init
// container's image.
func pod(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	e := benchdata.Event(cluster, i, rv)
	obj := bytes.Replace(e.Object, []byte(`"phase":"Running"`), fmt.Appendf(nil, `"phase":%q`, phases[(i+rv)%len(phases)]), 1)
	if i%3 == 0 {
		obj = bytes.Replace(obj, []byte(`"containers":[`), []byte(`"initContainers":[{"name":"init","image":"busybox:1.36"}],"containers":[`), 1)
	}
	e.Object = obj
	return e
}

type run struct {
	pods, clusters int
}

// apply writes every Pod at rv (only every third when update) and returns
// the events per second.
func (r run) apply(s *badger.Store, rv int, update bool, seq map[string]uint64) float64 {
	ctx := context.Background()
	per := r.pods / r.clusters
	start := time.Now()
	n := 0
	for c := range r.clusters {
		cluster := fmt.Sprintf("cluster-%d", c)
		var batch []feed.Event
		flush := func() {
			if len(batch) == 0 {
				return
			}
			if err := s.Apply(ctx, cluster, batch, seq[cluster]); err != nil {
				fail("apply: %v", err)
			}
			batch = batch[:0]
		}
		for i := range per {
			if update && i%3 != 0 {
				continue
			}
			seq[cluster]++
			batch = append(batch, feed.Event{Seq: seq[cluster], Event: pod(cluster, i, rv)})
			n++
			if len(batch) == 1000 {
				flush()
			}
		}
		flush()
	}
	return float64(n) / time.Since(start).Seconds()
}

// tmp is the run's directory, removed on every exit (os.Exit skips
// deferred calls).
var tmp string

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-counts: "+format+"\n", a...)
	exit(1)
}

func exit(code int) {
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

// cpuTime is the process's CPU time so far (user and system): on a
// shared machine a read's wall time counts the other processes' turns
// too, its CPU time does not (the store is idle while reads run).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func medianF(fs []float64) float64 {
	slices.Sort(fs)
	return fs[len(fs)/2]
}

func main() {
	r := run{pods: envInt("FV_COUNTS_PODS", 150000), clusters: envInt("FV_COUNTS_CLUSTERS", 3)}
	rounds, repeat := envInt("FV_COUNTS_ROUNDS", 2), envInt("FV_COUNTS_REPEAT", 5)
	fmt.Printf("bench-counts: %d Pods over %d clusters, %d apply rounds, median of %d reads; %d CPUs, %s\n", r.pods, r.clusters, rounds, repeat, runtime.NumCPU(), runtime.Version())
	var err error
	if tmp, err = os.MkdirTemp("", "bench-counts"); err != nil {
		fail("%v", err)
	}

	// 1. Apply with and without the value index, alternating.
	var withLoad, withoutLoad, withKeep, withoutKeep, withUpd, withoutUpd []float64
	var kept *badger.Store
	for round := range rounds {
		for _, indexed := range []bool{round%2 == 1, round%2 == 0} {
			o := badger.Options{Dir: fmt.Sprintf("%s/r%d-%v", tmp, round, indexed), ValueLogGCInterval: -1}
			if !indexed {
				o.ValueIndex = []badger.IndexedValue{}
			}
			s, err := badger.Open(o)
			if err != nil {
				fail("%v", err)
			}
			seq := map[string]uint64{}
			load := r.apply(s, 1, false, seq)
			keep := r.apply(s, 5, true, seq) // rv 5: the phase of rv 1
			upd := r.apply(s, 2, true, seq)
			if indexed {
				withLoad, withKeep, withUpd = append(withLoad, load), append(withKeep, keep), append(withUpd, upd)
			} else {
				withoutLoad, withoutKeep, withoutUpd = append(withoutLoad, load), append(withoutKeep, keep), append(withoutUpd, upd)
			}
			if indexed && round == rounds-1 {
				kept = s
				continue
			}
			if err := s.Close(); err != nil {
				fail("%v", err)
			}
		}
	}
	if kept == nil {
		fail("no indexed store kept")
	}
	fmt.Printf("apply (initial load): %.0f Pods/s with the value index, %.0f without: ratio %.2f\n", medianF(withLoad), medianF(withoutLoad), medianF(withLoad)/medianF(withoutLoad))
	fmt.Printf("apply (a third updated, phase kept): %.0f updates/s with, %.0f without: ratio %.2f\n", medianF(withKeep), medianF(withoutKeep), medianF(withKeep)/medianF(withoutKeep))
	fmt.Printf("apply (a third updated, phase changed): %.0f updates/s with, %.0f without: ratio %.2f\n", medianF(withUpd), medianF(withoutUpd), medianF(withUpd)/medianF(withoutUpd))

	// 2. Counts against the list of the same selection, once the store
	// has settled: Badger compacts in the background after a load, and
	// that CPU (this process's) is no read's.
	settled := false
	for range 120 {
		cpu := cpuTime()
		time.Sleep(500 * time.Millisecond)
		if cpuTime()-cpu < 25*time.Millisecond {
			settled = true
			break
		}
	}
	fmt.Printf("store settled: %v\n", settled)
	rd := kept.Reader(badger.ReaderOptions{})
	ctx := context.Background()
	dims := func(by ...string) []query.Dimension {
		out := make([]query.Dimension, len(by))
		for i, b := range by {
			d, err := query.ParseDimension(b)
			if err != nil {
				fail("%v", err)
			}
			out[i] = d
		}
		return out
	}
	web, _ := labels.Parse("app=web")
	restricted := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"cluster-0"}}, {Clusters: []string{"cluster-1"}, Namespaces: []string{"team-01", "team-02", "team-03"}}}}
	cases := []struct {
		name   string
		o      query.CountOptions
		target time.Duration
	}{
		{"cluster x status.phase", query.CountOptions{By: dims("cluster", "field:status.phase")}, 100 * time.Millisecond},
		{"image", query.CountOptions{By: dims("image")}, 200 * time.Millisecond},
		{"cluster x phase, app=web", query.CountOptions{By: dims("cluster", "field:status.phase"), Labels: web}, 100 * time.Millisecond},
		{"cluster x namespace, app=web", query.CountOptions{By: dims("cluster", "namespace"), Labels: web}, 100 * time.Millisecond},
		{"namespace x label:app", query.CountOptions{By: dims("namespace", "label:app")}, 0},
		{"cluster x phase, restricted caller", query.CountOptions{By: dims("cluster", "field:status.phase"), Visible: restricted}, 100 * time.Millisecond},
	}
	failed := false
	for _, c := range cases {
		c.o.GVR = benchdata.PodGVR
		var counts, lists, countsCPU, listsCPU []time.Duration
		var total int64
		var listed int
		for range repeat {
			start, cpu := time.Now(), cpuTime()
			res, err := rd.Count(ctx, c.o)
			if err != nil {
				fail("count %s: %v", c.name, err)
			}
			counts, countsCPU = append(counts, time.Since(start)), append(countsCPU, cpuTime()-cpu)
			total = res.Total
			start, cpu = time.Now(), cpuTime()
			listed = 0
			lo := query.ListOptions{GVR: benchdata.PodGVR, Labels: c.o.Labels, Visible: c.o.Visible, Limit: 500}
			for {
				p, err := rd.List(ctx, lo)
				if err != nil {
					fail("list %s: %v", c.name, err)
				}
				listed += len(p.Items)
				if p.Continue == "" {
					break
				}
				lo.Continue = p.Continue
			}
			lists, listsCPU = append(lists, time.Since(start)), append(listsCPU, cpuTime()-cpu)
		}
		if int64(listed) != total {
			fail("%s: counted %d objects, listed %d", c.name, total, listed)
		}
		cm, lm, cc, lc := median(counts), median(lists), median(countsCPU), median(listsCPU)
		verdict := ""
		if c.target > 0 {
			// Judged on CPU time: the wall time of a loaded machine is
			// mostly the other processes' (both are printed).
			verdict = fmt.Sprintf(" (target <= %v)", c.target)
			if cc > c.target {
				verdict += " OVER"
				failed = true
			}
		}
		fmt.Printf("count by %s over %d Pods: %v wall, %v CPU; list of the same selection %v wall, %v CPU: ratio %.3f (CPU %.3f)%s\n", c.name, total,
			cm.Round(100*time.Microsecond), cc.Round(100*time.Microsecond), lm.Round(time.Millisecond), lc.Round(time.Millisecond), float64(cm)/float64(lm), float64(cc)/float64(lc), verdict)
	}
	rd.Close()
	if err := kept.Close(); err != nil {
		fail("%v", err)
	}
	if failed {
		exit(1)
	}
	exit(0)
}
