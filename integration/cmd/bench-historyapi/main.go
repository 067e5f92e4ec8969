// Command bench-historyapi measures the history's reads through the REST
// API (issue #48, the read half of its Performance part; the ingest half
// is helper A's), side by side in one run, against a `fleetview up` hub
// process with the history on and a real kube-apiserver member whose
// Pods are written straight into etcd (harness.StorePods):
//
//   - the first page (500) of the change feed over the last hour, the
//     member's N Pods having been recorded as ADDED in it; target
//     <= 100 ms;
//   - one object's 100 revisions (label edits through the apiserver);
//     target <= 10 ms;
//   - an as-of list of the selected Pods as of the moment before the
//     edits ("few": one object to rebuild) and one as of the moment
//     before a churn ("churn": every FV_HIST_CHURN_EVERY-th Pod, 10 by
//     default, relabeled and every fiftieth deleted, all to rebuild),
//     each against today's list of the same selector, interleaved;
//     target <= 2x.
//
// It checks its results: the feed's page is full, the revisions number
// the edits plus one, and both lists hold exactly the N Pods; a miss exits
// non-zero. A figure over its target is reported, not a failure (a loaded
// shared machine).
//
// Scale: FV_HIST_PODS=15000 FV_HIST_REVISIONS=100 FV_HIST_REPEAT=7.
// docs/benchmarks/history.md records the results.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

type config struct {
	pods, revisions, repeat int
	churnEvery              int
}

func main() {
	cfg := config{pods: benchutil.EnvInt("FV_HIST_PODS", 15000), revisions: benchutil.EnvInt("FV_HIST_REVISIONS", 100),
		repeat: benchutil.EnvInt("FV_HIST_REPEAT", 7), churnEvery: benchutil.EnvInt("FV_HIST_CHURN_EVERY", 10)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
