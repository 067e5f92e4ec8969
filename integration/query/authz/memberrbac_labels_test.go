package authz

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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
// member1 is labelled idp=corp and binds corp:erin to Pods in shop, and a
// different "erin" to Pods in payments; member2 is not labelled and binds
// erin in shop. erin sees both shops and not member1's payments. Labelling
// member2 idp=corp makes her corp:erin there, whom member2 does not bind:
// she loses member2's shop. Unlabelling member1 makes her erin there: she
// sees member1's payments instead of its shop.
func TestMemberIdentityMapByLabels(t *testing.T) {
	ctx := context.Background()
	fleet := members.Get(t) // shop and payments with a Pod web each, fv-pod-reader
	bin := fixture.BuildFleetview(t)
	must := fixture.MustOK(t)
	bind := func(cs string, ns, user string) {
		t.Helper()
		must(fleet.Cluster(cs).Clientset().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "erin-pods"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: podReader.Name},
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
	label("member1", "idp=corp")
	bind("member1", "shop", "corp:erin")
	bind("member1", "payments", "erin") // another person: the unmapped name
	bind("member2", "shop", "erin")

	dir := t.TempDir()
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Contexts = nil // the collectors are processes of their own, reading their cluster-info ConfigMap
	o.NATSHost = "127.0.0.1"
	idmap := filepath.Join(dir, "identity-map")
	must(nil, os.WriteFile(idmap, []byte("rules:\n- clusterSelector: {matchLabels: {idp: corp}}\n  userPrefix: \"corp:\"\n"), 0o600))
	o.Auth.MemberIdentityMap = idmap
	fv := fixture.MemberRBACHub{Users: []string{"erin"}, Registry: "pods-and-rbac", Kinds: []string{"v1:Pod"}}.Start(t, o, dir)
	defer fv.Stop(t)
	kc := filepath.Join(dir, "collector.kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(o.NATSPort)
	for _, c := range []string{"member1", "member2"} {
		fixture.CollectorEnv{Bin: bin, Kubeconfig: kc, Context: c}.Start(t, c, natsURL)
	}

	erinSees := func(what string, want ...fixture.Ref) {
		t.Helper()
		began := time.Now()
		fixture.Eventually(t, 90*time.Second, func() error {
			got, err := fixture.GRPCList(fixture.Bearer("erin-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
			if err != nil {
				return err
			}
			return fixture.SameSet(got, fixture.Refs(want...))
		})
		t.Logf("%s: erin's list as expected after %s", what, time.Since(began).Round(time.Millisecond))
	}
	ref := func(c, ns string) fixture.Ref { return fixture.Ref{Cluster: c, Namespace: ns, Name: "web"} }
	erinSees("member1 labelled idp=corp", ref("member1", "shop"), ref("member2", "shop"))

	label("member2", "idp=corp")
	erinSees("member2 labelled idp=corp too", ref("member1", "shop"))

	if err := fleet.Cluster("member1").Clientset().CoreV1().ConfigMaps(infoNS).Delete(ctx, infoName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	erinSees("member1 unlabelled", ref("member1", "payments"))
}
