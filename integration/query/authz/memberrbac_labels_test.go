package authz

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/collector"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestMemberIdentityMapByLabels: an identity map rule may select members
// by the labels of their inventory record. Two real members, each with its
// collector binary (labels from the member's cluster-info ConfigMap, read
// at every 1 s heartbeat), a hub under --authorization-mode member-rbac
// with the rule "clusters labelled idp=corp know the caller as corp:NAME".
// member1 is labelled idp=corp and binds corp:dave to Pods in shop, and a
// different "dave" to Pods in payments; member2 is not labelled and binds
// dave in shop. dave sees both shops and not member1's payments. Labelling
// member2 idp=corp makes him corp:dave there, whom member2 does not bind:
// he loses member2's shop. Unlabelling member1 makes him dave there: he
// sees member1's payments instead of its shop.
func TestMemberIdentityMapByLabels(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	bin := fixture.BuildFleetview(t)
	must := fixture.MustOK(t)
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fv-pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	bind := func(cs string, ns, user string) {
		t.Helper()
		must(fleet.Cluster(cs).Clientset().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}))
	}
	infoNS, infoName, err := collector.ParseClusterInfoConfigMap(collector.DefaultClusterInfoConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	label := func(cs, labels string) {
		t.Helper()
		must(fleet.Cluster(cs).Clientset().CoreV1().ConfigMaps(infoNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: infoNS, Name: infoName},
			Data: map[string]string{collector.InfoKeyLabels: labels}}, metav1.CreateOptions{}))
	}
	for _, c := range fleet.Clusters() {
		cs := c.Clientset()
		for _, ns := range []string{"shop", "payments"} {
			must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
			must(cs.CoreV1().Pods(ns).Create(ctx, fixture.Pod(ns, "web", "web"), metav1.CreateOptions{}))
		}
		must(cs.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{}))
	}
	label("member1", "idp=corp")
	bind("member1", "shop", "corp:dave")
	bind("member1", "payments", "dave") // another person: the unmapped name
	bind("member2", "shop", "dave")

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Contexts = nil // the collectors are processes of their own, reading their cluster-info ConfigMap
	o.NATSHost = "127.0.0.1"
	o.Auth.TokenFile = write("tokens", "root-token,root,1,\"system:masters\"\ndave-token,dave,2\n")
	o.Auth.PolicyFile = write("policy", "rules:\n- users: [root]\n  verbs: [\"*\", registry-admin]\n  resources: [\"*\", registries, clusters]\n")
	o.Auth.AuthorizationMode = "member-rbac"
	o.Auth.MemberIdentityMap = write("identity-map", "rules:\n- clusterSelector: {matchLabels: {idp: corp}}\n  userPrefix: \"corp:\"\n")
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), fixture.Bearer("root-token").Ctx())
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("root-token").Ctx(), fixture.RegistryRequest(t, "pods-and-rbac", "v1:Pod",
		"rbac.authorization.k8s.io/v1:ClusterRole", "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1:Role", "rbac.authorization.k8s.io/v1:RoleBinding")); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "collector.kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(o.NATSPort)
	for _, c := range []string{"member1", "member2"} {
		fixture.CollectorEnv{Bin: bin, Kubeconfig: kc, Context: c}.Start(t, c, natsURL)
	}

	daveSees := func(what string, want ...fixture.Ref) {
		t.Helper()
		began := time.Now()
		fixture.Eventually(t, 90*time.Second, func() error {
			got, err := fixture.GRPCList(fixture.Bearer("dave-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
			if err != nil {
				return err
			}
			return fixture.SameSet(got, fixture.Refs(want...))
		})
		t.Logf("%s: dave's list as expected after %s", what, time.Since(began).Round(time.Millisecond))
	}
	ref := func(c, ns string) fixture.Ref { return fixture.Ref{Cluster: c, Namespace: ns, Name: "web"} }
	daveSees("member1 labelled idp=corp", ref("member1", "shop"), ref("member2", "shop"))

	label("member2", "idp=corp")
	daveSees("member2 labelled idp=corp too", ref("member1", "shop"))

	if err := fleet.Cluster("member1").Clientset().CoreV1().ConfigMaps(infoNS).Delete(ctx, infoName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	daveSees("member1 unlabelled", ref("member1", "payments"))
}
