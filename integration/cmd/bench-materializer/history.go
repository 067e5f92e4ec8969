package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// benchHistory is the history's A/B (issue #48): serve with history off
// (--history-retention 0) and on (--history, the bounds' defaults), alternating, each into a
// fresh store: the adds of the stream's n objects, then an update of each
// (one in ten relabeled) published and applied to the same store. It
// prints each run's rates and the medians' ratios (on / off); the target
// is >= 0.9 (docs/benchmarks/history.md). published is how many events
// the streams have taken so far (every object's subject holds one).
func benchHistory(ctx context.Context, js jetstream.JetStream, url, work, bin string, batch, n, k, rounds int, published uint64, rv int) error {
	// CPU per event (serve's user and system time) is printed beside the
	// rates: on the shared machine it moves less with the load than they
	// do, and the on / off ratio of CPU per event is the other reading
	// of the target.
	type rates struct{ add, update, addCPU, updateCPU []float64 }
	res := map[string]*rates{"off": {}, "on": {}}
	flags := map[string][]string{"off": {"--history-retention", "0"}, "on": {"--history"}}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	for r := range rounds {
		for _, mode := range []string{"off", "on"} {
			state := filepath.Join(work, "history-ab-"+mode)
			syncDisks()
			add, err := runServe(ctx, bin, url, state, batch, published-uint64(n), n, k, "", false, flags[mode]...)
			if err != nil {
				return err
			}
			rv++
			if err := publish(js, n, k, rv, fmt.Sprintf("jetstream publish of updates (rv %d, raw)", rv)); err != nil {
				return err
			}
			published += uint64(n)
			syncDisks()
			// FV_BENCH_PROFILE and FV_BENCH_HEAP_PROFILE profile the
			// updates with history on, the slower side.
			up, err := runServe(ctx, bin, url, state, batch, published-uint64(n), n, k, "", mode == "on", flags[mode]...)
			if err != nil {
				return err
			}
			size := dirSize(state)
			if err := os.RemoveAll(state); err != nil {
				return err
			}
			perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			res[mode].add = append(res[mode].add, rate(add.fromFirst))
			res[mode].update = append(res[mode].update, rate(up.fromFirst))
			res[mode].addCPU = append(res[mode].addCPU, perEvent(add.cpu))
			res[mode].updateCPU = append(res[mode].updateCPU, perEvent(up.cpu))
			fmt.Printf("  round %d history %-3s add %7.0f events/s (CPU %5.1f µs/event)  update %7.0f events/s (CPU %5.1f µs/event)  store %5.0f MiB (VmHWM %4.0f MiB, anonymous peak %4.0f MiB, file-backed at the end %4.0f MiB)\n",
				r+1, mode, rate(add.fromFirst), perEvent(add.cpu), rate(up.fromFirst), perEvent(up.cpu), float64(size)/(1<<20), float64(up.peakRSS)/1024, float64(up.peakAnon)/1024, float64(up.endFile)/1024)
		}
	}
	on, off := res["on"], res["off"]
	fmt.Printf("  %-55s add %.2fx, update %.2fx (median rates, history on / off; target >= 0.9)\n", "history on vs off",
		median(on.add)/median(off.add), median(on.update)/median(off.update))
	fmt.Printf("  %-55s add %.2fx, update %.2fx (median CPU per event, history off / on)\n", "history on vs off, by CPU",
		median(off.addCPU)/median(on.addCPU), median(off.updateCPU)/median(on.updateCPU))
	return nil
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
