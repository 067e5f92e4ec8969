package related

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// frankSees: Pods and ReplicaSets of member1 (all in shop), what
// member1's RBAC lets frank read.
func frankSees(nodeID string) bool {
	p := strings.Split(nodeID, "/")
	return p[0] == "member1" && (p[1]+"/"+p[2] == "/Pod" || p[1]+"/"+p[2] == "apps/ReplicaSet")
}

// relatedStart is one object Related starts from, in shop of member1.
type relatedStart struct {
	group, version, resource, kind, name string
	depth                                int
}

// checkMemberRBACRelated starts a second hub on the same members under
// member-rbac authorization: frank's only grant is member1's RoleBinding
// in shop to list Pods and ReplicaSets, so his related trees must hold
// exactly the edges between those (frankSees), and a start he may not
// read is NotFound.
func checkMemberRBACRelated(t *testing.T, ctx context.Context, fleet *harness.Fleet, edges []edge, starts []relatedStart) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m1 := fleet.Cluster("member1").Clientset()
	_, err := m1.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fv-related-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}},
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"apps"}, Resources: []string{"replicasets"}}}}, metav1.CreateOptions{})
	must(err)
	_, err = m1.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "frank-related"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fv-related-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "frank"}}}, metav1.CreateOptions{})
	must(err)
	dir := t.TempDir()
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Indexes = app.IndexOptions{Relations: true}
	fv := fixture.MemberRBACHub{Users: []string{"frank"}, Registry: "related-rbac", Kinds: []string{
		"v1:Pod", "apps/v1:Deployment", "apps/v1:ReplicaSet", "v1:Service", "v1:ConfigMap", "networking.k8s.io/v1:Ingress", "v1:PersistentVolumeClaim"}}.Start(t, o, dir)
	defer fv.Stop(t)
	got := func(r *fleetviewv1.RelatedResponse) []string {
		var out []string
		for _, e := range r.GetEdges() {
			out = append(out, edge{e.GetType(), e.GetFrom(), e.GetTo()}.String())
		}
		slices.Sort(out)
		return out
	}
	proved := false
	// The hub synced the objects and the members' RBAC: wait for frank's
	// answers to settle, then check each.
	fixture.Eventually(t, 120*time.Second, func() error {
		for _, s := range starts {
			req := &fleetviewv1.RelatedRequest{Group: s.group, Version: s.version, Resource: s.resource, Namespace: "shop", Name: s.name, Cluster: "member1", Depth: int32(s.depth)}
			r, err := fv.Query.Related(fixture.Bearer("frank-token").Ctx(), req)
			if !frankSees(id("member1", s.group, s.kind, "shop", s.name)) {
				if status.Code(err) != codes.NotFound {
					return fmt.Errorf("%s %s: %v, want NotFound (frank may not read it)", s.kind, s.name, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("%s %s: %v", s.kind, s.name, err)
			}
			want := expectRelated(edges, id("member1", s.group, s.kind, "shop", s.name), s.depth, frankSees, []string{id("member2", s.group, s.kind, "shop", s.name)})
			if g := got(r); !slices.Equal(g, want) {
				return fmt.Errorf("%s %s depth %d: got %s\nwant %s", s.kind, s.name, s.depth, fmtEdges(g), fmtEdges(want))
			}
			for _, n := range r.GetNodes() {
				if !frankSees(n.GetId()) {
					return fmt.Errorf("%s %s: node %s answered, frank may not read it", s.kind, s.name, n.GetId())
				}
			}
			proved = proved || len(want) > 0
		}
		return nil
	})
	if !proved {
		t.Error("no start has an edge frank may see: the check proves nothing")
	}
}
