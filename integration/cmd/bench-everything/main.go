// Command bench-everything measures a registry that caches every kind
// (issue #47, its Performance and Cost parts) beside its baseline in the
// same run: real kube-apiservers (integration/harness) each serving the
// built-in kinds, N CRDs of M objects each and P Pods, one `fleetview up`
// hub process and one `fleetview collector` process per member. Each of two
// phases starts a fresh hub and fresh collectors:
//
//   - baseline: an exact registry selecting only Pods;
//   - everything: one `apiVersion: "*", kind: "*"` selector.
//
// In each phase it measures the time from the registry's apply until
// /readyz/clusters answers 200 (which waits for every collector to expand
// the wildcard and sync every kind it stood for), the hub's RSS steady
// (after FV_EVERYTHING_SETTLE seconds) and peak (VmHWM), its goroutines,
// and per member: the collector's goroutines, RSS, kinds and objects
// (its /metrics), and the member apiserver's open WATCH requests
// (apiserver_longrunning_requests). The difference between the phases,
// divided by the kinds the wildcard added, is the cost of a kind per
// cluster; the hub's RSS over the objects it caches, the cost of an
// object. Then a CRD installed in one member during the everything phase
// is timed until its object is listed through the hub (target ≤ 10 s).
//
// It checks its own results: after each sync the hub lists every Pod of
// every member and, with the wildcard, every object of every CRD; any
// miss exits non-zero.
//
// Scale comes from the environment (defaults: the issue's):
//
//	FV_EVERYTHING_CLUSTERS=3 FV_EVERYTHING_PODS=50000 (per member)
//	FV_EVERYTHING_CRDS=30 FV_EVERYTHING_OBJECTS=200 (per CRD and member)
//	FV_EVERYTHING_SETTLE=10 (seconds idle before the steady figures)
//	FV_EVERYTHING_PROFILE_DIR (the hub's heap profile in each phase)
//
// CI runs it at 2,000 Pods and 10 CRDs x 50 objects (scripts/test.sh);
// docs/benchmarks/everything.md records the results.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

type config struct {
	clusters, pods, crds, objects int
	settle                        time.Duration
	// profileDir, when set (FV_EVERYTHING_PROFILE_DIR), receives the
	// hub's heap profile at the steady point of each phase.
	profileDir string
}

func main() {
	cfg := config{
		clusters: benchutil.EnvInt("FV_EVERYTHING_CLUSTERS", 3), pods: benchutil.EnvInt("FV_EVERYTHING_PODS", 50000),
		crds: benchutil.EnvInt("FV_EVERYTHING_CRDS", 30), objects: benchutil.EnvInt("FV_EVERYTHING_OBJECTS", 200),
		settle:     time.Duration(benchutil.EnvInt("FV_EVERYTHING_SETTLE", 10)) * time.Second,
		profileDir: os.Getenv("FV_EVERYTHING_PROFILE_DIR"),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
