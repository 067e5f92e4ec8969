package authz

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRBACReadiness: in a member-RBAC mode the hub is not ready while a
// followed member's RBAC has not been applied once (issue #43: /readyz
// answered 200 before any member's RBAC had arrived), saying which members
// and why; a member whose collector is down or cannot read RBAC, or whom
// no registry follows, does not hold it (/readyz names them as served
// without their RBAC), nor one past the bounded wait; an applied member
// stays applied.
func TestRBACReadiness(t *testing.T) {
	rbacRegistry := &registry.ResourceRegistry{Spec: registry.ResourceRegistrySpec{ResourceSelectors: []registry.ResourceSelector{
		{APIVersion: "v1", Kind: "Pod"},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, {APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, {APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
	}}}
	regs := []*registry.ResourceRegistry{rbacRegistry}
	rbacStates := func(skip, message string) []inventory.ResourceState {
		var out []inventory.ResourceState
		for _, r := range []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"} {
			if r == skip {
				continue
			}
			st := inventory.ResourceState{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: r, Synced: true}
			if r == "clusterroles" {
				st.Message = message
			}
			out = append(out, st)
		}
		return out
	}
	recs := []*inventory.Cluster{
		{Name: "m1", Ready: true, Resources: rbacStates("", "")},
		{Name: "m2", Ready: true, Resources: rbacStates("", "")},
		{Name: "m3", Ready: false, Message: "member apiserver unreachable"},
		{Name: "m4", Ready: true, Resources: rbacStates("", "forbidden: cannot list clusterroles")},
		{Name: "m5", Ready: true, Resources: rbacStates("roles", "")},
	}
	applied, last := map[string]uint64{}, map[string]uint64{}
	for _, r := range recs {
		applied[r.Name], last[r.Name] = 7, 7 // the materializer is through every stream
	}
	cache := map[string]int{"m1/rolebindings": 5, "m2/rolebindings": 5, "m5/rolebindings": 2}
	f := &RBACFollower{}
	f.account("rolebindings", "m1", 5)
	f.account("rolebindings", "m2", 3)
	f.account("rolebindings", "m5", 2)
	now := time.Unix(1000, 0)
	// Every stream is applied through its end (applied, last): a resource
	// is applied once its collector reports it synced.
	synced := func(_ context.Context, _ *inventory.Cluster, st inventory.ResourceState, gvr schema.GroupVersionResource, _, _ map[string]uint64) (bool, string, error) {
		if !st.Synced {
			return false, gvr.Resource + " not synced by the collector", nil
		}
		return true, "", nil
	}
	r := &RBACReadiness{follower: f, synced: synced, wait: time.Minute, now: func() time.Time { return now },
		count: func(_ context.Context, cluster, resource string) (int, error) {
			return cache[cluster+"/"+resource], nil
		}}
	check := func(what string, wantReady bool, wantWhy, wantNote []string) {
		t.Helper()
		ok, why := r.Check(context.Background(), recs, regs, applied, last)
		if ok != wantReady {
			t.Fatalf("%s: ready %v (%s), want %v", what, ok, why, wantReady)
		}
		for _, w := range wantWhy {
			if !strings.Contains(why, w) {
				t.Fatalf("%s: reason %q lacks %q", what, why, w)
			}
		}
		if strings.Contains(why, "m1 (") {
			t.Fatalf("%s: reason %q names m1, whose RBAC is applied", what, why)
		}
		note := r.Served()
		for _, w := range wantNote {
			if !strings.Contains(note, w) {
				t.Fatalf("%s: /readyz note %q lacks %q", what, note, w)
			}
		}
		if len(wantNote) == 0 && note != "" {
			t.Fatalf("%s: /readyz note %q, want none", what, note)
		}
	}
	check("m2 and m5 not applied", false,
		[]string{"member clusters' RBAC not applied yet", "m2 (rolebindings: 3 of 5 applied)", "m5 (roles not reported by its collector yet)"},
		[]string{"m3 (collector not ready)", "m4 (clusterroles: forbidden: cannot list clusterroles)"})

	f.account("rolebindings", "m2", 2)
	recs[4] = &inventory.Cluster{Name: "m5", Ready: true, Resources: rbacStates("", "")}
	check("all applied", true, nil, []string{"m3", "m4"})

	f.account("rolebindings", "m1", -5) // a later change is the follower's, not readiness's
	check("applied once is enough", true, nil, []string{"m3", "m4"})

	recs = append(recs, &inventory.Cluster{Name: "m6", Ready: true, Resources: rbacStates("", "")})
	cache["m6/rolebindings"] = 1
	applied["m6"], last["m6"] = 7, 7
	check("a member joining waits", false, []string{"m6 (rolebindings: 0 of 1 applied)"}, []string{"m3", "m4"})
	now = now.Add(time.Minute)
	check("no longer than the bound", true, nil, []string{"m6 (not applied after 1m0s: rolebindings: 0 of 1 applied)"})

	r.applied = nil
	if ok, _ := r.Check(context.Background(), recs, nil, applied, last); !ok || !strings.Contains(r.Served(), "m1 (no registry selects its RBAC resources)") {
		t.Fatalf("no registry follows RBAC: ready %v, note %q", ok, r.Served())
	}
}
