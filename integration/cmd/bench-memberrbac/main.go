// Command bench-memberrbac measures member RBAC (issue #29, its
// Performance part) side by side in one run: a `fleetview up` hub process
// with --authorization-mode member-rbac, one `fleetview collector` process
// per member, and real kube-apiservers with RBAC on (integration/harness),
// whose Pods are written straight into etcd (harness.StorePods).
//
// In each member, user alice is granted Pods in N namespaces through N
// RoleBindings (one per namespace, to one ClusterRole), bob through one
// ClusterRoleBinding (everywhere), and root is in system:masters. A few
// Pods (1%) live in namespaces alice is not granted, so her answer is a
// filtered one. It measures:
//
//   - the same lists as alice (restricted) and as bob and root
//     (unrestricted), interleaved, through the Kubernetes API (the whole
//     list following continue, and 500-object pages as kubectl asks) and
//     REST; target: alice ≤ 1.1x bob;
//   - alice's first list after an RBAC change (her reach computed again
//     from every member's authorizer) against her later ones;
//   - a RoleBinding created (deleted) in a member until alice's next read
//     through fleetview shows (refuses) that namespace;
//   - a hub restart until every member's authorizer is rebuilt from the
//     cache (alice's list exact again);
//   - the RBAC mirror's memory (in-use heap allocated by
//     internal/memberrbac and the query API's RBAC follower, from a heap
//     profile of a hub started with GODEBUG=memprofilerate=512), per member
//     and per RBAC object.
//
// It checks its own results: alice's list holds exactly the Pods of her
// namespaces in every member, bob's and root's every Pod, and each change
// shows in alice's reads; any miss exits non-zero.
//
// Scale comes from the environment (defaults: the issue's):
//
//	FV_RBAC_CLUSTERS=3 FV_RBAC_PODS=50000 (per member, in the granted
//	namespaces) FV_RBAC_NAMESPACES=1000 FV_RBAC_REPEAT=5 FV_RBAC_CHANGES=5
//	FV_RBAC_PROFILE_DIR (hub CPU profiles of alice's and bob's lists)
//
// docs/benchmarks/memberrbac.md records the results.
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
	clusters, pods, namespaces, repeat, changes int
	// hidden is the Pods per member in namespaces alice is not granted.
	hidden     int
	profileDir string
}

func main() {
	cfg := config{
		clusters: benchutil.EnvInt("FV_RBAC_CLUSTERS", 3), pods: benchutil.EnvInt("FV_RBAC_PODS", 50000),
		namespaces: benchutil.EnvInt("FV_RBAC_NAMESPACES", 1000), repeat: benchutil.EnvInt("FV_RBAC_REPEAT", 5),
		changes: benchutil.EnvInt("FV_RBAC_CHANGES", 5), profileDir: os.Getenv("FV_RBAC_PROFILE_DIR"),
	}
	cfg.hidden = max(cfg.pods/100, hiddenNamespaces)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
