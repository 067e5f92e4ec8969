package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// relatedTokens: an admin, and carol who reads Pods and ConfigMaps only.
const relatedTokens = `admin-token,admin,1,"fleet-admins"
carol-token,carol,2
`

const relatedPolicy = `rules:
- groups: [fleet-admins]
  verbs: ["*", registry-admin]
  resources: ["*", registries]
- users: [carol]
  verbs: [get, list, watch, search]
  resources: [pods, configmaps]
`

// TestConsoleRelated opens objects in the console and reads their related
// objects' tree: each node and how it relates to its parent, links that
// open the related object, for the admin and for carol, whose tree holds
// only what she may read. The expected tree is computed from the member's
// own objects.
func TestConsoleRelated(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	fixture.CreateNS(t, ctx, fleet, "shop")
	cs := fleet.Cluster("member1").Clientset()
	must := fixture.MustOK(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	dep, err := cs.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel.MatchLabels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cs.AppsV1().ReplicaSets("shop").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}}},
		Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel.MatchLabels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(cs.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}}, metav1.CreateOptions{}))
	pod := fixture.QPod("shop", "web-1-a", "web", "")
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	must(cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}))
	must(cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}))

	dir := t.TempDir()
	for f, s := range map[string]string{"tokens.csv": relatedTokens, "policy.yaml": relatedPolicy} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Indexes = app.IndexOptions{Relations: true, CountIndex: true} // off by default (cmd/fleetview/app/indexes.go)
	o.Auth.TokenFile = filepath.Join(dir, "tokens.csv")
	o.Auth.PolicyFile = filepath.Join(dir, "policy.yaml")
	fv := fixture.StartUpWith(t, o, grpc.WithTransportCredentials(insecure.NewCredentials()), fixture.Bearer("admin-token").Ctx())
	defer fv.Stop(t)
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "related",
		"v1:Pod", "apps/v1:Deployment", "apps/v1:ReplicaSet", "v1:Service", "v1:ConfigMap")); err != nil {
		t.Fatal(err)
	}
	fv.AwaitOK(t, "/readyz/clusters", 90*time.Second)

	// The tree of the ReplicaSet, depth 2, from the member's objects: its
	// owner, the Pods it selects; then what owns, selects or is named by
	// those Pods (breadth first, each node under the first that reaches it).
	id := func(group, kind, name string) string {
		return strings.Join([]string{"member1", group, kind, "shop", name}, "/")
	}
	pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"owned by " + id("apps", "Deployment", dep.Name)}
	for _, p := range pods.Items {
		want = append(want, "selects "+id("", "Pod", p.Name))
		for _, v := range p.Spec.Volumes {
			if v.ConfigMap != nil {
				want = append(want, "references "+id("", "ConfigMap", v.ConfigMap.Name))
			}
		}
		if p.Spec.ServiceAccountName != "" { // set by the member's admission
			want = append(want, "references "+id("", "ServiceAccount", p.Spec.ServiceAccountName))
		}
		want = append(want, "selected by "+id("", "Service", "web"))
	}
	slices.Sort(want)
	fixture.Eventually(t, 90*time.Second, func() error {
		r, err := fv.Query.Related(fixture.Bearer("admin-token").Ctx(), &fleetviewv1.RelatedRequest{Group: "apps", Version: "v1", Resource: "replicasets",
			Namespace: "shop", Name: "web-1", Cluster: "member1", Depth: 2})
		if err != nil || len(r.GetNodes()) != len(want)+1 {
			return fmt.Errorf("related: %v %v", r, err)
		}
		return nil
	})

	b := browser(t)
	var errs pageErrors
	page := tab(t, b, &errs)
	defer errs.check(t)
	console := fv.REST + "/console/"
	login := func(tok string) {
		do(t, page, chromedp.Navigate(console), chromedp.Evaluate[chromedp.Void](`sessionStorage.clear()`), chromedp.Reload())
		waitJS[bool](t, page, 10*time.Second, `!document.getElementById('login').hidden`)
		do(t, page, chromedp.SendKeys(`#token`, tok))
		click(t, page, `#login-form button`)
		waitJS[bool](t, page, 10*time.Second, `!document.getElementById('view-search').hidden`)
	}
	// tree reads the related tree: "word id" per node, sorted.
	const tree = `(() => { const li = [...document.querySelectorAll('#obj-related li')]; return li.length && li.map(l => l.querySelector('.rel-word').textContent + l.dataset.node).sort(); })()`

	t.Run("admin: the ReplicaSet's tree, and its links", func(t *testing.T) {
		login("admin-token")
		do(t, page, chromedp.Navigate(console+"#/object/member1/apps/v1/replicasets/shop/web-1"))
		got := waitJS[[]string](t, page, 20*time.Second, tree)
		if !slices.Equal(got, want) {
			t.Fatalf("tree %v, want %v", got, want)
		}
		// The ConfigMap sits under the Pod (reached through it), and its
		// link opens it.
		nested := evalJS[bool](t, page, `!!document.querySelector('#obj-related li[data-node$="/Pod/shop/web-1-a"] li[data-node$="/ConfigMap/shop/cfg"]')`)
		if !nested {
			t.Error("the ConfigMap is not under the Pod")
		}
		click(t, page, `#obj-related li[data-node$="/ConfigMap/shop/cfg"] > a`)
		title := waitJS[string](t, page, 10*time.Second, `document.getElementById('obj-title').textContent.includes('configmaps/cfg') && document.getElementById('obj-title').textContent`)
		if !strings.Contains(title, "member1") {
			t.Errorf("title %q", title)
		}
		got = waitJS[[]string](t, page, 20*time.Second, tree)
		if !slices.Contains(got, "referenced by "+id("", "Pod", "web-1-a")) {
			t.Errorf("the ConfigMap's tree %v lacks the Pod that mounts it", got)
		}
	})
	t.Run("carol: only what she reads", func(t *testing.T) {
		login("carol-token")
		do(t, page, chromedp.Navigate(console+"#/object/member1/core/v1/pods/shop/web-1-a"))
		got := waitJS[[]string](t, page, 20*time.Second, tree)
		if w := []string{"references " + id("", "ConfigMap", "cfg")}; !slices.Equal(got, w) {
			t.Fatalf("carol's tree %v, want %v", got, w)
		}
		text := evalJS[string](t, page, `document.getElementById('obj-related').textContent`)
		for _, hidden := range []string{"web-1 ", "ReplicaSet", "Deployment", "Service"} {
			if strings.Contains(text, hidden) {
				t.Errorf("carol's tree %q names %q", text, hidden)
			}
		}
	})
}
