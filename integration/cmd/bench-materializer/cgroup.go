package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	cg, err := newMemoryCgroup(int64(limitMB) << 20)
	if err != nil {
		fmt.Printf("  %-55s not measured: %v\n", line, err)
		return 0, nil
	}
	defer os.Remove(cg)
	d, hwm, anon, err := f(cg)
	if err != nil && oomKills(cg) > 0 {
		// Not enough memory at this limit is a result, not a failure of
		// the benchmark.
		fmt.Printf("  %-55s killed by the OOM killer at the limit (peak RSS %.0f MiB, anonymous %.0f MiB): %v\n", line, float64(hwm)/1024, float64(anon)/1024, err)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", line, err)
	}
	peak, err := cgroupPeak(cg)
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

// joinCgroup moves pid into the cgroup.
func joinCgroup(cgroup string, pid int) error {
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into %s: %w", pid, cgroup, err)
	}
	return nil
}

// newMemoryCgroup creates a memory cgroup (v1 or v2) under this process's
// own, limited to limit bytes, and returns its directory.
func newMemoryCgroup(limit int64) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile string
		switch {
		case parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			root := "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
				root = "/sys/fs/cgroup/unified"
			}
			ctrl, err := os.ReadFile(filepath.Join(root, parts[2], "cgroup.subtree_control"))
			if err != nil || !strings.Contains(string(ctrl), "memory") {
				continue // no memory controller delegated here
			}
			dir, limitFile = filepath.Join(root, parts[2]), "memory.max"
		default:
			continue
		}
		cg := filepath.Join(dir, fmt.Sprintf("fleetview-bench-%d", os.Getpid()))
		if err := os.Mkdir(cg, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(cg)
			return "", err
		}
		return cg, nil
	}
	return "", errors.New("no writable memory cgroup controller")
}

// oomKills is how many processes the OOM killer killed in the cgroup.
func oomKills(cg string) int {
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(cg, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return 0
}

// cgroupPeak is the cgroup's peak memory use (heap and page cache), bytes.
func cgroupPeak(cg string) (int64, error) {
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		if b, err := os.ReadFile(filepath.Join(cg, f)); err == nil {
			return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no peak memory figure in %s", cg)
}
