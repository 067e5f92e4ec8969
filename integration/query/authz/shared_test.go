package authz

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

// podReader may read Pods; the member-RBAC tests bind it to their users.
var podReader = &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fv-pod-reader"},
	Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}

// members are the two member clusters TestMemberRBACForgedObjects and
// TestMemberIdentityMapByLabels share: in each, the namespaces shop and
// payments with the Pod web, and the ClusterRole fv-pod-reader. Each test
// binds the role to users of its own (dave, erin) and starts its own hub;
// neither changes a member's RBAC another test's user depends on. Tests
// whose assertions read every namespace (TestMemberRBACReads), rewrite a
// member's RBAC at random (the agreement tests) or start members with
// flags of their own keep members of their own.
var members = &fixture.SharedFleet{
	Opts: harness.Options{Clusters: []string{"member1", "member2"}},
	Setup: func(t *testing.T, ctx context.Context, fleet *harness.Fleet) {
		must := fixture.MustOK(t)
		for _, c := range fleet.Clusters() {
			cs := c.Clientset()
			for _, ns := range []string{"shop", "payments"} {
				must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
				must(cs.CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, "web", "web"), metav1.CreateOptions{}))
			}
			must(cs.RbacV1().ClusterRoles().Create(ctx, podReader, metav1.CreateOptions{}))
		}
	},
}

func TestMain(m *testing.M) { os.Exit(members.Run(m)) }
