package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// benchAB applies and replays the same pre-filled stream with two fleetview
// binaries in turn, so that both see the same stream and, alternating, the
// same machine: on a shared machine whose speed drifts by more than the
// difference sought, runs minutes apart compare nothing.
func benchAB(ctx context.Context, url, work, a, b string, batch, n, k int) error {
	rounds, err := envInt("FV_BENCH_AB_ROUNDS", 3)
	if err != nil {
		return err
	}
	// FV_BENCH_AB_REPLAY=0 leaves the replay out: half the time, for a
	// bisect of the apply rate.
	replay := os.Getenv("FV_BENCH_AB_REPLAY") != "0"
	type result struct{ apply, cpu, replay []float64 }
	res := map[string]*result{a: {}, b: {}}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	for r := range rounds {
		for _, bin := range []string{a, b} {
			state := filepath.Join(work, "ab-state")
			syncDisks()
			sr, err := runServe(ctx, bin, url, state, batch, 0, n, k, "", false)
			if err != nil {
				return err
			}
			if err := os.RemoveAll(state); err != nil {
				return err
			}
			var d time.Duration
			if replay {
				syncDisks()
				if d, _, _, err = runRebuild(ctx, bin, url, state, batch, ""); err != nil {
					return err
				}
				if err := os.RemoveAll(state); err != nil {
					return err
				}
			}
			cpu := float64(sr.cpu.Microseconds()) / float64(n)
			res[bin].apply = append(res[bin].apply, rate(sr.fromFirst))
			res[bin].cpu = append(res[bin].cpu, cpu)
			res[bin].replay = append(res[bin].replay, d.Seconds())
			fmt.Printf("  round %d %-40s apply %6.0f events/s, serve CPU %5.1f µs/event (VmHWM %4.0f MiB)  replay %6.2f s\n", r+1, bin, rate(sr.fromFirst), cpu, float64(sr.peakRSS)/1024, d.Seconds())
		}
	}
	for _, bin := range []string{a, b} {
		fmt.Printf("  median %-41s apply %6.0f events/s, serve CPU %5.1f µs/event  replay %6.2f s\n", bin, median(res[bin].apply), median(res[bin].cpu), median(res[bin].replay))
	}
	return nil
}
