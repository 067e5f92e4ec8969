package authz

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestMemberRBACForgedObjects: a member's RBAC objects are untrusted. With
// member1's own NATS credential (a hub with per-cluster users), playing its
// collector, an attacker publishes on member1's stream first a malformed
// version of the RoleBinding that lets dave read Pods in shop (roleRef kind
// "Evil"), then a well-formed ClusterRoleBinding granting dave Pods
// everywhere. Under --authorization-mode member-rbac the malformed one is
// refused and fails closed (dave no longer reads member1's shop), the
// forged valid one widens dave's reach in member1 alone, and member2's
// answer to dave is the same throughout.
func TestMemberRBACForgedObjects(t *testing.T) {
	ctx := context.Background()
	fleet := members.Get(t)
	must := fixture.MustOK(t)
	dave := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}
	for _, c := range fleet.Clusters() {
		must(c.Clientset().RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dave-pods"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: podReader.Name}, Subjects: []rbacv1.Subject{dave}}, metav1.CreateOptions{}))
	}
	real, err := fleet.Cluster("member1").Clientset().RbacV1().RoleBindings("shop").Get(ctx, "dave-pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	const pass1, hubPass = "member1-secret-0123456789", "hub-secret-0123456789abcdef"
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	natsAddr, natsPort := fixture.FreePort(t)
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.NATSHost, o.NATSPort = "127.0.0.1", natsPort
	o.NATSUsersFile, o.NATSHubPasswordFile = write("nats-users", "member1:"+pass1+"\n"), write("hub-pass", hubPass+"\n")
	fv := fixture.MemberRBACHub{Users: []string{"dave"}, Registry: "pods-and-rbac", Kinds: []string{"v1:Pod"}}.Start(t, o, dir)
	defer fv.Stop(t)
	daveSees := func(want ...fixture.Ref) {
		t.Helper()
		fixture.Eventually(t, 90*time.Second, func() error {
			got, err := fixture.GRPCList(fixture.Bearer("dave-token").Ctx(), fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
			if err != nil {
				return err
			}
			return fixture.SameSet(got, fixture.Refs(want...))
		})
	}
	m1shop, m2shop := fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"}
	daveSees(m1shop, m2shop)

	// member1's credential, playing its collector, on its own subjects.
	_, js := fixture.ClusterCredential(t, "nats://"+natsAddr, "member1", pass1)
	publish := func(resource, uid, ns, name, kind, object string) {
		t.Helper()
		gvr := schema.GroupVersionResource{Group: rbacv1.GroupName, Version: "v1", Resource: resource}
		ev := &fleetviewv1.ResourceEvent{Cluster: "member1", Gvr: stream.ProtoGVR(gvr), Uid: uid, Name: name, Namespace: ns,
			Kind: kind, ResourceVersion: "999999", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(object)}
		data, err := stream.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, stream.ObjectSubject("member1", gvr, uid), data, jetstream.WithMsgID(stream.MsgID(ev))); err != nil {
			t.Fatalf("member1 publishes on its own stream: %v", err)
		}
	}
	meta := func(ns, name, uid string) string {
		m := `"metadata":{"name":"` + name + `","uid":"` + uid + `","resourceVersion":"999999","annotations":{"fleetview.io/cluster":"member1","resource.karmada.io/cached-from-cluster":"member1"}`
		if ns != "" {
			m += `,"namespace":"` + ns + `"`
		}
		return m + `}`
	}

	// A malformed version of the real binding: refused, and dave loses what
	// it granted in member1 (fail closed); member2 is untouched.
	publish("rolebindings", string(real.UID), "shop", "dave-pods", "RoleBinding", fmt.Sprintf(
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",%s,"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Evil","name":"fv-pod-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"dave"}]}`,
		meta("shop", "dave-pods", string(real.UID))))
	daveSees(m2shop)

	// A forged, well-formed ClusterRoleBinding: it widens dave's reach in
	// member1, whose credential wrote it, and nowhere else.
	publish("clusterrolebindings", "forged-crb", "", "forged", "ClusterRoleBinding", fmt.Sprintf(
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",%s,"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"fv-pod-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"dave"}]}`,
		meta("", "forged", "forged-crb")))
	daveSees(m1shop, fixture.Ref{Cluster: "member1", Namespace: "payments", Name: "web"}, m2shop)
}
