package history

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
)

const memberRBACTokens = `root-token,root,1,"system:masters"
dave-token,dave,2
`

// Under member-rbac the policy decides only what is no member's object.
const memberRBACPolicy = `rules:
- users: [root]
  verbs: ["*", registry-admin]
  resources: ["*", secrets, registries, clusters]
`

// TestHistoryMemberRBAC: under --authorization-mode member-rbac, the
// change feed and revisions show a user exactly what the members' own
// RBAC lets them list now: dave, whom member1 alone binds to Pods in
// shop, sees those Pods' changes and nothing of member2, of payments, of
// Secrets or of the RBAC objects, and member2's revisions are its refusal.
func TestHistoryMemberRBAC(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop", "payments")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m1 := fleet.Cluster("member1").Clientset()
	_, err := m1.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fv-pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}, metav1.CreateOptions{})
	must(err)
	_, err = m1.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dave-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fv-pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}}}, metav1.CreateOptions{})
	must(err)

	dir := t.TempDir()
	must(os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(memberRBACTokens), 0o600))
	must(os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(memberRBACPolicy), 0o600))
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Auth.TokenFile = filepath.Join(dir, "tokens.csv")
	o.Auth.PolicyFile = filepath.Join(dir, "policy.yaml")
	o.Auth.AuthorizationMode = "member-rbac"
	enableHistory(&o)
	fv := fixture.StartUpWith(t, o, grpcInsecure(), fixture.Bearer("root-token").Ctx())
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("root-token").Ctx(), fixture.RegistryRequest(t, "pods-and-rbac", "v1:Pod", "v1:Secret",
		"rbac.authorization.k8s.io/v1:ClusterRole", "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1:Role", "rbac.authorization.k8s.io/v1:RoleBinding")); err != nil {
		t.Fatal(err)
	}
	root, dave := hub{fv.REST, "root-token"}, hub{fv.REST, "dave-token"}
	for _, c := range fleet.Clusters() {
		for _, ns := range []string{"shop", "payments"} {
			_, err := c.Clientset().CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, "web", "web"), metav1.CreateOptions{})
			must(err)
			_, err = c.Clientset().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
			must(err)
		}
	}
	// Every Pod edited once the hub holds it.
	fixture.Eventually(t, 90*time.Second, func() error {
		es := root.all(t, "/v1/changes?resources=pods&types=ADDED")
		if len(es) != 4 {
			return fmt.Errorf("%d Pods recorded, want 4", len(es))
		}
		return nil
	})
	for _, c := range fleet.Clusters() {
		for _, ns := range []string{"shop", "payments"} {
			p, err := c.Clientset().CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			must(err)
			p.Labels["tier"] = "gold"
			_, err = c.Clientset().CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{FieldManager: "labeler"})
			must(err)
		}
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		es := root.all(t, "/v1/changes?resources=pods&types=MODIFIED")
		if len(es) < 4 {
			return fmt.Errorf("%d Pod edits recorded, want 4", len(es))
		}
		return nil
	})

	// The hub judges dave by member1's RoleBinding once it holds it: the
	// RBAC objects sync beside the Pods, not before them, so at CI's load
	// the first ask can come before (a 403 then is the rule working).
	want := []string{"ADDED member1/pods/shop/web", "MODIFIED member1/pods/shop/web"}
	fixture.Eventually(t, 60*time.Second, func() error {
		var p page
		code, body, err := dave.get("/v1/changes?objects=true", &p)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("dave's feed: %d %v %s", code, err, body)
		}
		if p.Continue != "" || !slices.Equal(names(p.Changes), want) {
			return fmt.Errorf("dave's feed %v (continue %q), want %v", names(p.Changes), p.Continue, want)
		}
		return nil
	})
	for path, code := range map[string]int{
		"/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member2":      http.StatusForbidden,
		"/v1/revisions/core/v1/pods/web?namespace=payments&cluster=member1":  http.StatusForbidden,
		"/v1/revisions/core/v1/secrets/creds?namespace=shop&cluster=member1": http.StatusForbidden,
		"/v1/changes?clusters=member2":                                       http.StatusForbidden,
	} {
		var p page
		got, body, err := dave.get(path, &p)
		if err != nil || got != code {
			t.Errorf("dave %s: %d %v %s, want %d", path, got, err, body, code)
		}
	}
	if r := dave.all(t, "/v1/revisions/core/v1/pods/web?namespace=shop&cluster=member1"); len(r) != 2 {
		t.Errorf("dave's revisions of member1/shop/web: %v, want 2", r)
	}
}
