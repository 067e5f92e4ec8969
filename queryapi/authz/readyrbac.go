package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
)

// DefaultMemberRBACReadyWait bounds how long one member's RBAC that has not
// arrived keeps the hub not ready in a member-RBAC mode.
const DefaultMemberRBACReadyWait = 2 * time.Minute

// rbacKinds are the RBAC kinds a member's authorizer is built from, by
// the resource the follower watches.
var rbacKinds = map[string]string{
	"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
	"Role": "roles", "RoleBinding": "rolebindings",
}

// RBACReadiness decides, in a member-RBAC mode, whether every followed
// member's RBAC has been applied once: before, the hub would answer that
// member's reads Forbidden (or a per-cluster list empty) where the member
// allows them, so it is not ready (issue #43). A member is followed when
// a registry selects RBAC resources for it; its RBAC has been applied once
// when its collector reports each of them synced, the materializer has
// applied its stream through their sync markers, and the follower has
// taken in as many of its objects of each as the cache holds. Once
// applied, a member no longer holds the hub (latched: a later change is
// the follower's to apply, not a reason to stop serving).
//
// A member does not hold the hub without bound: not when its collector is
// not ready (as in /readyz/clusters, one cluster down must not take the
// hub out of service), not when its collector cannot read its RBAC, and
// not for longer than wait after the hub first saw it waiting. The hub
// then serves it without its RBAC (it allows only system:masters there,
// as a member with no RBAC objects would) and says so in /readyz's answer.
type RBACReadiness struct {
	follower *RBACFollower
	// synced reports whether one resource of a member is synced by its
	// collector and applied through its latest sync marker.
	synced ResourceApplied
	// count is how many objects of resource the cache holds for cluster.
	count func(ctx context.Context, cluster, resource string) (int, error)
	wait  time.Duration
	now   func() time.Time

	mu      sync.Mutex
	applied map[string]bool      // latched
	since   map[string]time.Time // first seen waiting
	note    string               // members served without their RBAC
}

// ResourceApplied reports whether one resource of rec is synced by its
// collector and applied by the materializer through its latest sync
// marker (applied and last: each cluster stream's applied and last
// sequence), and if not why.
type ResourceApplied func(ctx context.Context, rec *inventory.Cluster, r inventory.ResourceState, gvr schema.GroupVersionResource,
	applied, last map[string]uint64) (bool, string, error)

// NewRBACReadiness judges the members' RBAC followed by f: count is how
// many objects of an RBAC resource the cache holds for a cluster, wait
// (<= 0: DefaultMemberRBACReadyWait) how long one member may hold the hub.
func NewRBACReadiness(f *RBACFollower, count func(ctx context.Context, cluster, resource string) (int, error), synced ResourceApplied, wait time.Duration) *RBACReadiness {
	if wait <= 0 {
		wait = DefaultMemberRBACReadyWait
	}
	return &RBACReadiness{follower: f, synced: synced, count: count, wait: wait, now: time.Now}
}

// memberWait is one member's state, for the reason /readyz gives.
type memberWait struct {
	cluster, why string
}

// Check reports whether no followed member holds the hub, with the
// members that do and why; it records the members served without their
// RBAC (Served).
func (r *RBACReadiness) Check(ctx context.Context, recs []*inventory.Cluster, regs []*registry.ResourceRegistry,
	applied, last map[string]uint64) (bool, string) {
	var waiting, without []memberWait
	now := r.now()
	for _, rec := range recs {
		r.mu.Lock()
		done := r.applied[rec.Name]
		r.mu.Unlock()
		if done {
			continue
		}
		resources := followedRBAC(regs, rec)
		if len(resources) == 0 {
			without = append(without, memberWait{rec.Name, "no registry selects its RBAC resources"})
			continue
		}
		if !rec.Ready {
			without = append(without, memberWait{rec.Name, "collector not ready"})
			continue
		}
		why, unservable, err := r.memberApplied(ctx, rec, resources, applied, last)
		if err != nil {
			why = err.Error()
		}
		switch {
		case why == "":
			r.mu.Lock()
			if r.applied == nil {
				r.applied = map[string]bool{}
			}
			r.applied[rec.Name] = true
			delete(r.since, rec.Name)
			r.mu.Unlock()
		case unservable:
			without = append(without, memberWait{rec.Name, why})
		default:
			r.mu.Lock()
			if r.since == nil {
				r.since = map[string]time.Time{}
			}
			first, ok := r.since[rec.Name]
			if !ok {
				first = now
				r.since[rec.Name] = now
			}
			r.mu.Unlock()
			if now.Sub(first) >= r.wait {
				without = append(without, memberWait{rec.Name, fmt.Sprintf("not applied after %v: %s", r.wait, why)})
			} else {
				waiting = append(waiting, memberWait{rec.Name, why})
			}
		}
	}
	r.mu.Lock()
	r.note = ""
	if len(without) > 0 {
		r.note = "serving without member RBAC (only system:masters allowed there): " + listMembers(without)
	}
	r.mu.Unlock()
	if len(waiting) > 0 {
		return false, "member clusters' RBAC not applied yet: " + listMembers(waiting)
	}
	return true, ""
}

// Served is what /readyz adds to its answer: the members served without
// their RBAC ("" when none).
func (r *RBACReadiness) Served() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.note
}

// listMembers names at most ten members and how many more.
func listMembers(ms []memberWait) string {
	slices.SortFunc(ms, func(a, b memberWait) int { return strings.Compare(a.cluster, b.cluster) })
	parts := make([]string, 0, min(len(ms), 10)+1)
	for i, m := range ms {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ms)-10))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", m.cluster, m.why))
	}
	return strings.Join(parts, ", ")
}

// followedRBAC lists the RBAC resources the registries select for rec
// (sorted, each once).
func followedRBAC(regs []*registry.ResourceRegistry, rec *inventory.Cluster) []string {
	var out []string
	for _, reg := range regs {
		for _, sel := range reg.SelectorsFor(rec.Info()) {
			if sel.IsWildcard() {
				for kind, res := range rbacKinds {
					if ok, _ := sel.Selects(rbacv1.SchemeGroupVersion.WithKind(kind)); ok && !slices.Contains(out, res) {
						out = append(out, res)
					}
				}
				continue
			}
			gvk := sel.GroupVersionKind()
			if res, ok := rbacKinds[gvk.Kind]; ok && gvk.Group == rbacv1.GroupName && !slices.Contains(out, res) {
				out = append(out, res)
			}
		}
	}
	slices.Sort(out)
	return out
}

// memberApplied says why rec's RBAC has not been applied once ("": it
// has); unservable when its collector cannot serve a resource (waiting
// would not help).
func (r *RBACReadiness) memberApplied(ctx context.Context, rec *inventory.Cluster, resources []string,
	applied, last map[string]uint64) (why string, unservable bool, err error) {
	for _, res := range resources {
		i := slices.IndexFunc(rec.Resources, func(st inventory.ResourceState) bool {
			return st.Group == rbacv1.GroupName && st.Resource == res
		})
		if i < 0 {
			return res + " not reported by its collector yet", false, nil
		}
		st := rec.Resources[i]
		if st.Message != "" {
			return fmt.Sprintf("%s: %s", res, st.Message), true, nil
		}
		gvr := schema.GroupVersionResource{Group: st.Group, Version: st.Version, Resource: st.Resource}
		ok, why, err := r.synced(ctx, rec, st, gvr, applied, last)
		if err != nil || !ok {
			return why, false, err
		}
		n, err := r.count(ctx, rec.Name, res)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", res, err)
		}
		if got := r.follower.accountedFor(res, rec.Name); got < n {
			return fmt.Sprintf("%s: %d of %d applied", res, got, n), false, nil
		}
	}
	return "", false, nil
}
