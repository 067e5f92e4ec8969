package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// runRebuild runs fleetview rebuild on state until it exits (in cgroup,
// when set) and returns its wall time, peak RSS and peak anonymous RSS (KiB).
func runRebuild(ctx context.Context, bin, natsURL, state string, batch int, cgroup string) (time.Duration, int64, int64, error) {
	start := time.Now()
	rb := exec.CommandContext(ctx, bin, "rebuild", "--nats-url", natsURL, "--state-dir", state, "--progress", "none", "--batch-size", strconv.Itoa(batch))
	var rbOut strings.Builder
	rb.Stdout, rb.Stderr = &rbOut, &rbOut
	if err := rb.Start(); err != nil {
		return 0, 0, 0, err
	}
	if cgroup != "" {
		if err := benchutil.JoinCgroup(cgroup, rb.Process.Pid); err != nil {
			_ = rb.Process.Kill()
			_ = rb.Wait()
			return 0, 0, 0, err
		}
	}
	rbDone := make(chan error, 1)
	go func() { rbDone <- rb.Wait() }()
	var hwm, anon int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-rbDone:
			if err != nil {
				return 0, hwm, anon, fmt.Errorf("rebuild: %v\n%s", err, rbOut.String())
			}
			d := time.Since(start)
			// Part of the replay's time: Badger flushing its memtables.
			for _, line := range strings.Split(rbOut.String(), "\n") {
				if strings.Contains(line, "rebuilt store closed") {
					if _, took, ok := strings.Cut(line, "took="); ok {
						fmt.Printf("  (closing the rebuilt store: %s)\n", took)
					}
				}
			}
			return d, hwm, anon, nil
		case <-tick.C:
			hwm = max(hwm, vmHWM(rb.Process.Pid))
			anon = max(anon, procStatus(rb.Process.Pid, "RssAnon"))
		}
	}
}

// serveRun is what one run of fleetview serve measured.
type serveRun struct {
	dur, fromFirst    time.Duration // from process start, from the first applied batch
	cpu               time.Duration // serve's CPU (user and system) over fromFirst
	peakRSS, peakAnon int64         // KiB
	endRSS, endFile   int64         // KiB, once every event is applied
}

// runServe runs fleetview serve on state (whose store holds the streams
// through the sum of sequences from: 0 for a fresh one) until it applied the
// next n events of the k streams, then stops it. With cgroup set, the process
// is moved into that memory cgroup first; with profiles, the FV_BENCH_*
// profiles and traces are taken.
func runServe(ctx context.Context, bin, natsURL, state string, batch int, from uint64, n, k int, cgroup string, profiles bool, flags ...string) (serveRun, error) {
	var r serveRun
	start := time.Now()
	serve, metrics, stop, err := startServe(ctx, bin, natsURL, state, batch, cgroup, flags...)
	if err != nil {
		return r, err
	}
	defer stop()
	var firstAt time.Time
	var cpuAt time.Duration
	if profiles {
		takeProfiles(metrics)
	}
	for {
		a, err := applied(metrics, k)
		if err == nil && a > from && firstAt.IsZero() {
			firstAt, cpuAt = time.Now(), procCPU(serve.Process.Pid)
		}
		r.peakRSS = max(r.peakRSS, vmHWM(serve.Process.Pid))
		r.peakAnon = max(r.peakAnon, procStatus(serve.Process.Pid, "RssAnon"))
		if err == nil && a >= from+uint64(n) {
			break
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if time.Since(start) > 30*time.Minute {
			return r, fmt.Errorf("serve did not apply through %d in 30 minutes (applied %d; log %s.log)", from+uint64(n), a, state)
		}
		if !alive(serve.Process.Pid) {
			return r, fmt.Errorf("serve exited having applied through %d of %d (log %s.log)", a, from+uint64(n), state)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.dur = time.Since(start)
	if !firstAt.IsZero() {
		r.fromFirst = time.Since(firstAt)
		r.cpu = procCPU(serve.Process.Pid) - cpuAt
	}
	r.peakRSS = max(r.peakRSS, vmHWM(serve.Process.Pid))
	r.endRSS = vmRSS(serve.Process.Pid)
	r.endFile = procStatus(serve.Process.Pid, "RssFile")
	if prof := os.Getenv("FV_BENCH_HEAP_PROFILE"); prof != "" && profiles {
		// What serve's heap holds with every object applied.
		if err := fetchTo("http://"+metrics+"/debug/pprof/heap?gc=1", prof); err != nil {
			fmt.Fprintln(os.Stderr, "heap profile:", err)
		}
	}
	return r, nil
}

// startServe starts fleetview serve on state (in the memory cgroup, when
// set) and returns it, its metrics address, and stop, which ends it and
// waits for it.
func startServe(ctx context.Context, bin, natsURL, state string, batch int, cgroup string, flags ...string) (*exec.Cmd, string, func(), error) {
	metrics := freeAddr()
	serve := exec.CommandContext(ctx, bin, append([]string{"serve", "--nats-url", natsURL, "--state-dir", state,
		"--grpc-addr", freeAddr(), "--http-addr", freeAddr(), "--metrics-addr", metrics, "--batch-size", strconv.Itoa(batch)}, flags...)...)
	serveLog, err := os.Create(state + ".log")
	if err != nil {
		return nil, "", nil, err
	}
	serve.Stdout, serve.Stderr = serveLog, serveLog
	if err := serve.Start(); err != nil {
		serveLog.Close()
		return nil, "", nil, err
	}
	stop := func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		serveLog.Close()
	}
	if cgroup != "" {
		if err := benchutil.JoinCgroup(cgroup, serve.Process.Pid); err != nil {
			stop()
			return nil, "", nil, err
		}
	}
	return serve, metrics, stop, nil
}

// syncDisks writes dirty pages out and says how long it took.
func syncDisks() {
	start := time.Now()
	syscall.Sync()
	fmt.Printf("  (sync of dirty pages: %s)\n", time.Since(start).Round(time.Millisecond))
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// takeProfiles starts the profiles and traces the FV_BENCH_* variables ask
// for, of serve (at metrics) and of this process.
func takeProfiles(metrics string) {
	if prof := os.Getenv("FV_BENCH_PROFILE_SERVER"); prof != "" {
		// A CPU profile of this process (the NATS server) during ingest.
		go func() {
			after, _ := envInt("FV_BENCH_PROFILE_AFTER", 3)
			time.Sleep(time.Duration(after) * time.Second)
			f, err := os.Create(prof)
			if err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			time.Sleep(10 * time.Second)
			pprof.StopCPUProfile()
		}()
	}
	// A 10 s CPU profile and a 3 s execution trace (go tool trace
	// -pprof=sync|sched) of serve, FV_BENCH_PROFILE_AFTER seconds in.
	for env, path := range map[string]string{"FV_BENCH_PROFILE": "profile?seconds=10", "FV_BENCH_TRACE": "trace?seconds=3"} {
		if file := os.Getenv(env); file != "" {
			go func() {
				after, _ := envInt("FV_BENCH_PROFILE_AFTER", 3)
				time.Sleep(time.Duration(after) * time.Second)
				if err := fetchTo("http://"+metrics+"/debug/pprof/"+path, file); err != nil {
					fmt.Fprintln(os.Stderr, env+":", err)
				}
			}()
		}
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// applied sums the badger materializer's applied sequences (one message
// per subject, so sequence = events) over the clusters. The page is
// parsed, not matched as text: client_golang orders labels by name and
// writes large values in exponent form.
func applied(addr string, k int) (uint64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for c := range k {
		want[clusterName(c)] = true
	}
	var n uint64
	for _, m := range fams["fleetview_materializer_applied_sequence"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["materializer"] == "badger" && want[labels["cluster"]] {
			n += uint64(m.GetGauge().GetValue())
		}
	}
	return n, nil
}

func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func vmHWM(pid int) int64 { return procStatus(pid, "VmHWM") }

// procCPU is the user and system CPU time pid used so far: on a shared
// machine the CPU per event moves less with the load than the rate does
// (it still moves: caches are shared). Linux's clock tick is 100 Hz.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest) // f[0] is field 3 (state); utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * (time.Second / 100)
}
func vmRSS(pid int) int64 { return procStatus(pid, "VmRSS") }
