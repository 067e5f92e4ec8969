package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// goMemMB is the Go runtime's view of the hub's memory, in MB.
type goMemMB struct{ heapInuse, stacks, nextGC, unreturned, liveAfterGC float64 }

// goMemory reads the Go runtime's gauges from the hub's /metrics: which
// part of the RSS is heap in use, which is goroutine stacks, how far the
// heap may grow before the next collection (GOGC's headroom), and how much
// freed heap the runtime still holds, not yet returned to the OS (its
// scavenger returns it over minutes). Then, after a collection it forces,
// the live heap: what the hub needs, garbage aside.
func goMemory(ctx context.Context, metrics string) (goMemMB, error) {
	m, err := goGauges(ctx, metrics)
	if err != nil {
		return m, err
	}
	if _, _, err := benchutil.Get(ctx, metrics+"/debug/pprof/heap?gc=1"); err != nil {
		return m, err
	}
	after, err := goGauges(ctx, metrics)
	if err != nil {
		return m, err
	}
	m.liveAfterGC = after.liveAfterGC
	return m, nil
}

func goGauges(ctx context.Context, metrics string) (goMemMB, error) {
	fams, err := benchutil.MetricFamilies(ctx, metrics)
	if err != nil {
		return goMemMB{}, err
	}
	gauges := benchutil.SingleGauges(fams)
	for name, v := range gauges {
		gauges[name] = v / (1 << 20)
	}
	m := goMemMB{heapInuse: gauges["go_memstats_heap_inuse_bytes"], stacks: gauges["go_memstats_stack_inuse_bytes"], nextGC: gauges["go_memstats_next_gc_bytes"],
		unreturned: gauges["go_memstats_heap_idle_bytes"] - gauges["go_memstats_heap_released_bytes"], liveAfterGC: gauges["go_memstats_heap_alloc_bytes"]}
	if m.heapInuse == 0 || m.nextGC == 0 || m.liveAfterGC == 0 {
		return m, fmt.Errorf("GET /metrics: no go_memstats_heap_inuse_bytes, go_memstats_next_gc_bytes or go_memstats_heap_alloc_bytes")
	}
	return m, nil
}

// steadyProfile writes the hub's heap profile after a collection
// (path+".heap.pprof": what stays live with nothing changing) and its
// goroutines (path+".goroutines.txt").
func steadyProfile(ctx context.Context, metrics, path string) error {
	if err := save(ctx, saved{metrics + "/debug/pprof/heap?gc=1", path + ".heap.pprof"}, saved{metrics + "/debug/pprof/goroutine?debug=1", path + ".goroutines.txt"}); err != nil {
		return err
	}
	benchutil.Logf("steady profiles in %s.*", path)
	return nil
}

// saved is a URL whose body is written to file.
type saved struct{ url, file string }

// save GETs each URL, in order, into its file.
func save(ctx context.Context, ps ...saved) error {
	for _, p := range ps {
		code, body, err := benchutil.Get(ctx, p.url)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", p.url, code, body)
		}
		if err := os.WriteFile(p.file, body, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// hub is one `fleetview up` process.
type hub struct {
	args []string
	bin  string
	log  string
	cmd  *exec.Cmd
	rest string
	// cgroup, when set, is the memory cgroup that holds the hub's process
	// (FV_FLEET_HUB_MEMORY).
	cgroup string
}

func (h *hub) start(ctx context.Context) error {
	f, err := os.OpenFile(h.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	h.cmd = exec.CommandContext(ctx, h.bin, h.args...)
	h.cmd.Stdout, h.cmd.Stderr = f, f
	h.cmd.Cancel = func() error { return h.cmd.Process.Signal(syscall.SIGTERM) }
	if err := h.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	if h.cgroup != "" {
		if err := benchutil.JoinCgroup(h.cgroup, h.cmd.Process.Pid); err != nil {
			_ = h.cmd.Process.Kill()
			return fmt.Errorf("FV_FLEET_HUB_MEMORY: %w", err)
		}
	}
	go func() { _ = h.cmd.Wait(); f.Close() }()
	return nil
}

func (h *hub) stop() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	for range 600 {
		if err := h.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("hub did not stop within 60 s of SIGTERM")
}

// waitFor polls cond every 100 ms (benchutil.WaitFor).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	return benchutil.WaitFor(ctx, timeout, 100*time.Millisecond, what, cond)
}

// applyRegistry selects the Pods of namespace ns, and its ConfigMaps too
// when withConfigMaps (the registry change). With everything
// (FV_FLEET_REGISTRY=everything, issue #47) it selects every kind of
// every namespace instead, ConfigMaps excluded until the change.
func applyRegistry(ctx context.Context, rest, ns string, withConfigMaps, everything bool) error {
	sels := []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": ns}}
	if withConfigMaps {
		sels = append(sels, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns})
	}
	if everything {
		all := map[string]any{"apiVersion": "*", "kind": "*"}
		if !withConfigMaps {
			all["exclude"] = []any{map[string]any{"kind": "ConfigMap"}}
		}
		sels = []any{all}
	}
	return benchutil.ApplyRegistry(ctx, rest, "", "fleet", sels)
}

// profile writes the hub's CPU profile (to path+".cpu.pprof"), heap
// profile (path+".heap.pprof") and goroutines (path+".goroutines.txt") while load runs again and again, for
// finding what a request costs per cluster it does not touch.
func profile(ctx context.Context, metrics, path string, load func(context.Context)) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			load(pctx)
		}
	}()
	if err := save(ctx, saved{metrics + "/debug/pprof/profile?seconds=5", path + ".cpu.pprof"}, saved{metrics + "/debug/pprof/heap", path + ".heap.pprof"}, saved{metrics + "/debug/pprof/goroutine?debug=1", path + ".goroutines.txt"}); err != nil {
		return err
	}
	benchutil.Logf("profiles in %s.*.pprof", path)
	return nil
}

// profileSync starts the hub's CPU profile over the sync a registry apply
// starts, or over a registry change (base+".cpu.pprof"; none when base is
// ""), FV_FLEET_SYNC_PROFILE_SECONDS long (20 by default), for finding what
// each cluster costs while the fleet syncs; the function it returns waits
// for the profile and writes it, with the heap the last collection found
// live (base+".heap.pprof"; none forced).
func profileSync(ctx context.Context, metrics, base string) func() error {
	if base == "" {
		return func() error { return nil }
	}
	seconds := benchutil.EnvInt("FV_FLEET_SYNC_PROFILE_SECONDS", 20)
	path := base + ".cpu.pprof"
	done := make(chan error, 1)
	go func() {
		code, body, err := benchutil.Get(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", metrics, seconds))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("sync profile: %d %s", code, body)
		}
		if err == nil {
			err = os.WriteFile(path, body, 0o600)
		}
		if err == nil {
			err = save(ctx, saved{metrics + "/debug/pprof/heap", base + ".heap.pprof"})
		}
		done <- err
	}()
	return func() error {
		err := <-done
		if err == nil {
			benchutil.Logf("CPU profile in %s", path)
		}
		return err
	}
}
