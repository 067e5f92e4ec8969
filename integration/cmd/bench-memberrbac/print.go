package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// target is the issue's: alice's list at most this many times bob's.
const target = 1.1

func printResult(w io.Writer, r *result) {
	cfg := r.cfg
	host, _ := os.Hostname()
	fmt.Fprintf(w, "\nmember RBAC benchmark: %d members x %d Pods (%d in alice's %d namespaces, %d in %d others), %s\n",
		cfg.clusters, cfg.pods+cfg.hidden, cfg.pods, cfg.namespaces, cfg.hidden, hiddenNamespaces, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %s, %d CPUs; load average %s at the start, %s at the end\n", host, runtime.NumCPU(), r.loadBefore, r.loadDone)
	fmt.Fprintf(w, "every Pod cached %s after the registry apply; alice's view complete (the mirror built) %s after it\n\n",
		r.ingest.Round(time.Millisecond), r.mirrorBuilt.Round(time.Millisecond))

	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	met := 0
	fmt.Fprintf(w, "| list (time to last byte, median of %d; the hub's CPU time meanwhile, mean) | alice: %d RoleBindings (%d rows) | bob: a ClusterRoleBinding (%d rows) | root: system:masters | alice / bob (target ≤ %.1fx) | alice / bob, hub CPU | alice / root |\n",
		cfg.repeat, cfg.namespaces, cfg.clusters*cfg.pods, cfg.clusters*(cfg.pods+cfg.hidden), target)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for i, p := range listPaths {
		l := r.lists[i]
		wall := func(u string) time.Duration { return benchutil.Median(l.wall[u]) }
		cpu := func(u string) time.Duration { return mean(l.cpu[u]) }
		ratio := float64(wall(restricted)) / float64(wall(unrestricted))
		mark := "met"
		if ratio <= target {
			met++
		} else {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "| %s | %s; %s | %s; %s | %s; %s | %.2fx %s | %.2fx | %.2fx |\n", p.label, ms(wall(restricted)), ms(cpu(restricted)),
			ms(wall(unrestricted)), ms(cpu(unrestricted)), ms(wall("root")), ms(cpu("root")), ratio, mark,
			float64(cpu(restricted))/float64(max(cpu(unrestricted), benchutil.ClockTick)), float64(wall(restricted))/float64(wall("root")))
	}
	fmt.Fprintf(w, "\n%d of %d list targets met\n\n", met, len(listPaths))

	ct := r.changes
	fmt.Fprintf(w, "| a change in a member's RBAC (%d changes, members in turn) | median | max |\n|---|---|---|\n", len(ct.grant))
	row := func(label string, d []time.Duration, round time.Duration) {
		fmt.Fprintf(w, "| %s | %s | %s |\n", label, benchutil.Median(d).Round(round), benchutil.Percentile(d, 1).Round(round))
	}
	row("RoleBinding created → alice's next read of its namespace shows that member's Pods", ct.grant, time.Millisecond)
	row("RoleBinding deleted → alice's next read there is 403", ct.revoke, time.Millisecond)
	row("alice's list of one namespace, the first after a change (her reach computed again)", ct.cold, time.Microsecond)
	row("the same list, the next time (her reach remembered)", ct.warm, time.Microsecond)
	fmt.Fprintf(w, "| hub restart → ready / → alice's view complete (every member's authorizer rebuilt from the cache) | %s / %s | |\n\n",
		r.restartReady.Round(time.Millisecond), r.restartRebuilt.Round(time.Millisecond))

	objs := 0
	for _, n := range r.rbacObjects {
		objs += n
	}
	bindings := r.rbacObjects["rolebindings"] + r.rbacObjects["clusterrolebindings"]
	mib := func(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "| the RBAC mirror (in-use heap under internal/memberrbac and the follower; heap profile sampling every %d B) | |\n|---|---|\n", r.heap.rate)
	fmt.Fprintf(w, "| RBAC objects mirrored, all members (ClusterRoles %d, ClusterRoleBindings %d, Roles %d, RoleBindings %d) | %d |\n",
		r.rbacObjects["clusterroles"], r.rbacObjects["clusterrolebindings"], r.rbacObjects["roles"], r.rbacObjects["rolebindings"], objs)
	fmt.Fprintf(w, "| mirror, all members | %s (of %s hub heap in use) |\n", mib(r.heap.mirror), mib(r.heap.total))
	fmt.Fprintf(w, "| per member | %s |\n", mib(r.heap.mirror/int64(cfg.clusters)))
	fmt.Fprintf(w, "| per RBAC object / per binding (the mirror over the %d objects / %d bindings) | %.0f B / %.0f B |\n",
		objs, bindings, float64(r.heap.mirror)/float64(max(objs, 1)), float64(r.heap.mirror)/float64(max(bindings, 1)))
	fmt.Fprintf(w, "| hub RSS after the lists and changes (before the restarts) | %.0f MB |\n", r.rssMB)
}

// mean is the mean of d (CPU times come in clock ticks: a mean over the
// rounds resolves less than one).
func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(len(d), 1))
}
