package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// inCgroup runs f (what, applying n events) in a new memory cgroup of limitMB
// and reports its rate and memory; without a writable memory cgroup it
// says so and measures nothing.
func inCgroup(limitMB, n int, what string, f func(cg string) (d time.Duration, hwm, anon int64, err error)) (time.Duration, error) {
	line := fmt.Sprintf("%s in a %d MiB memory cgroup", what, limitMB)
	if limitMB == 0 {
		fmt.Printf("  %-55s not measured: FV_BENCH_CGROUP_MB=0\n", what+" in a memory cgroup")
		return 0, nil
	}
	cg, err := benchutil.NewMemoryCgroup(fmt.Sprintf("fleetview-bench-%d", os.Getpid()), int64(limitMB)<<20)
	if err != nil {
		fmt.Printf("  %-55s not measured: %v\n", line, err)
		return 0, nil
	}
	defer os.Remove(cg)
	d, hwm, anon, err := f(cg)
	if err != nil && benchutil.OOMKills(cg) > 0 {
		// Not enough memory at this limit is a result, not a failure of
		// the benchmark.
		fmt.Printf("  %-55s killed by the OOM killer at the limit (peak RSS %.0f MiB, anonymous %.0f MiB): %v\n", line, float64(hwm)/1024, float64(anon)/1024, err)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", line, err)
	}
	peak, err := benchutil.CgroupPeak(cg)
	if err != nil {
		return 0, err
	}
	fmt.Printf("  %-55s %8.0f events/s  (%d in %s) peak RSS (VmHWM) %.0f MiB, anonymous %.0f MiB; cgroup peak (heap + page cache) %.0f MiB\n",
		line, float64(n)/d.Seconds(), n, d.Round(time.Millisecond), float64(hwm)/1024, float64(anon)/1024, float64(peak)/(1<<20))
	return d, nil
}

// runAgain completes a measurement whose first run took first: runs 2 to
// repeat of f, each into a fresh state directory, removed after.
func runAgain(repeat int, work string, first time.Duration, f func(i int, state string) (time.Duration, error)) ([]time.Duration, error) {
	ds := []time.Duration{first}
	for i := 2; i <= repeat; i++ {
		syncDisks()
		state := filepath.Join(work, "state-again")
		d, err := f(i, state)
		if err != nil {
			return nil, err
		}
		if err := os.RemoveAll(state); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// inCgroups runs inCgroup repeat times, each in a new cgroup, and returns
// the durations measured (none where no memory cgroup can be made).
func inCgroups(repeat, limitMB, n int, what string, f func(cg string) (time.Duration, int64, int64, error)) ([]time.Duration, error) {
	var ds []time.Duration
	for range repeat {
		syncDisks()
		d, err := inCgroup(limitMB, n, what, f)
		if err != nil || d == 0 {
			return ds, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}
