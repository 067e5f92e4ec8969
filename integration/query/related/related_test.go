package related

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const tokens = `admin-token,root,1,"fleet-admins"
carol-token,carol,2
`

// The administrators read everything, Secrets too (a "*" alone never
// covers them). carol reads Pods, ReplicaSets and ConfigMaps of member1
// only: no
// Deployment, Service, Secret, Ingress, PVC, Node, nor anything of
// member2.
const policy = `rules:
- groups: [fleet-admins]
  verbs: ["*"]
  resources: ["*", secrets]
- users: [root]
  verbs: [registry-admin]
  resources: [registries]
- users: [carol]
  verbs: [get, list, search]
  resources: [pods, replicasets.apps, configmaps]
  clusters: [member1]
`

var carolResources = map[string]bool{"/Pod": true, "apps/ReplicaSet": true, "/ConfigMap": true}

func carolSees(nodeID string) bool {
	p := strings.Split(nodeID, "/")
	return p[0] == "member1" && carolResources[p[1]+"/"+p[2]]
}

func ptr[T any](v T) *T { return &v }

// TestRelatedAgreesWithMembers builds Deployments -> ReplicaSets -> Pods,
// Services, ConfigMaps and a Secret the Pods mount, an Ingress and a PVC on
// two members, and checks Related over REST and gRPC and the relation
// field selectors through kubectl against the relations computed from
// the members' own objects, for an administrator and for carol, who
// reads only some kinds of one member.
func TestRelatedAgreesWithMembers(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop")
	must := fixture.MustOK(t)
	pods := map[string]int{"member1": 3, "member2": 1}
	for _, name := range []string{"member1", "member2"} {
		cs := fleet.Cluster(name).Clientset()
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		dep, err := cs.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := cs.AppsV1().ReplicaSets("shop").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr(true)}}},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": "7d9f"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "pod-template-hash": "7d9f"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		must(cs.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}))
		must(cs.CoreV1().Secrets("shop").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"pw": "x"}}, metav1.CreateOptions{}))
		for i := range pods[name] {
			p := fixture.QPod("shop", fmt.Sprintf("web-7d9f-%d", i), "web", "")
			p.Labels["pod-template-hash"] = "7d9f"
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr(true)}}
			p.Spec.Volumes = []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			}
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "pw"}}}}
			must(cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}))
		}
		// A Pod of another app, selected by nothing of web's.
		must(cs.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "api-0", "api", ""), metav1.CreateOptions{}))
		must(cs.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}))
		must(cs.NetworkingV1().Ingresses("shop").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "web.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr(networkingv1.PathTypePrefix),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}, metav1.CreateOptions{}))
		must(cs.CoreV1().PersistentVolumeClaims("shop").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "pv-" + name,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{}))
	}

	dir := t.TempDir()
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Indexes = app.IndexOptions{Relations: true, CountIndex: true} // off by default (cmd/fleetview/app/indexes.go)
	pool, _ := fixture.AuthHub{Tokens: tokens, Policy: policy, ClientCA: true,
		Files: map[string]string{"admin.token": "admin-token", "carol.token": "carol-token"}}.Configure(t, &o, dir)
	fv, httpc := fixture.StartTLS(t, o, pool)
	defer fv.Stop(t)
	rest := "https://" + o.HTTPAddr
	if _, err := fv.Registries.ApplyRegistry(fixture.Bearer("admin-token").Ctx(), fixture.RegistryRequest(t, "related",
		"v1:Pod", "apps/v1:Deployment", "apps/v1:ReplicaSet", "v1:Service", "v1:ConfigMap", "networking.k8s.io/v1:Ingress", "v1:PersistentVolumeClaim")); err != nil {
		t.Fatal(err)
	}

	// The members' own relations.
	var edges []edge
	for _, name := range []string{"member1", "member2"} {
		edges = append(edges, memberEdges(t, ctx, name, fleet.Cluster(name).Clientset(), "shop")...)
	}
	all := func(string) bool { return true }

	type start struct {
		group, version, resource, kind, name string
		depth                                int
	}
	starts := []start{
		{"apps", "v1", "deployments", "Deployment", "web", 1},
		{"apps", "v1", "deployments", "Deployment", "web", 3},
		{"apps", "v1", "replicasets", "ReplicaSet", "web-7d9f", 2},
		{"", "v1", "pods", "Pod", "web-7d9f-0", 1},
		{"", "v1", "pods", "Pod", "web-7d9f-0", 2},
		{"", "v1", "configmaps", "ConfigMap", "web-config", 2},
		{"", "v1", "services", "Service", "web", 1},
		{"networking.k8s.io", "v1", "ingresses", "Ingress", "web", 2},
		{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "data", 1},
	}
	expected := func(s start, visible func(string) bool) []string {
		root := id("member1", s.group, s.kind, "shop", s.name)
		return expectRelated(edges, root, s.depth, visible, []string{id("member2", s.group, s.kind, "shop", s.name)})
	}
	got := func(r *fleetviewv1.RelatedResponse) []string {
		var out []string
		for _, e := range r.GetEdges() {
			out = append(out, edge{e.GetType(), e.GetFrom(), e.GetTo()}.String())
		}
		slices.Sort(out)
		return out
	}
	request := func(s start) *fleetviewv1.RelatedRequest {
		return &fleetviewv1.RelatedRequest{Group: s.group, Version: s.version, Resource: s.resource, Namespace: "shop", Name: s.name, Cluster: "member1", Depth: int32(s.depth)}
	}
	restRelated := func(tok string, s start) (*fleetviewv1.RelatedResponse, int, error) {
		g := s.group
		if g == "" {
			g = "core"
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/related/%s/%s/%s/%s?namespace=shop&cluster=member1&depth=%d", rest, g, s.version, s.resource, s.name, s.depth), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := httpc.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, resp.StatusCode, fmt.Errorf("REST %d: %s %v", resp.StatusCode, b, err)
		}
		var r fleetviewv1.RelatedResponse
		return &r, resp.StatusCode, protojson.Unmarshal(b, &r)
	}

	// Synced: the administrator's answers match the members' (the
	// collector sends the objects in no particular order).
	fixture.Eventually(t, 120*time.Second, func() error {
		for _, s := range starts {
			r, err := fv.Query.Related(fixture.Bearer("admin-token").Ctx(), request(s))
			if err != nil {
				return err
			}
			if g, w := got(r), expected(s, all); !slices.Equal(g, w) {
				return fmt.Errorf("%s %s depth %d: got %s\nwant %s", s.kind, s.name, s.depth, fmtEdges(g), fmtEdges(w))
			}
		}
		return nil
	})
	for _, who := range []struct {
		tok     string
		visible func(string) bool
	}{{"admin-token", all}, {"carol-token", carolSees}} {
		for _, s := range starts {
			t.Run(fmt.Sprintf("%s %s %s depth %d", who.tok, s.kind, s.name, s.depth), func(t *testing.T) {
				want := expected(s, who.visible)
				r, err := fv.Query.Related(fixture.Bearer(who.tok).Ctx(), request(s))
				rr, code, rerr := restRelated(who.tok, s)
				if !who.visible(id("member1", s.group, s.kind, "shop", s.name)) {
					// A starting object carol cannot read is not found,
					// like one that does not exist.
					if status.Code(err) != codes.NotFound || code != http.StatusNotFound {
						t.Fatalf("hidden start: gRPC %v, REST %d %v: want NotFound", err, code, rerr)
					}
					return
				}
				if err != nil || rerr != nil {
					t.Fatalf("gRPC %v, REST %v", err, rerr)
				}
				if len(want) == 0 {
					t.Fatal("no edge expected: the case proves nothing")
				}
				if g := got(r); !slices.Equal(g, want) {
					t.Errorf("gRPC: %s\nwant %s", fmtEdges(g), fmtEdges(want))
				}
				if g := got(rr); !slices.Equal(g, want) {
					t.Errorf("REST: %s\nwant %s", fmtEdges(g), fmtEdges(want))
				}
				// Nodes: exactly the ends of the edges and the start, none
				// hidden; cached ones carry their uid.
				ends := map[string]bool{id("member1", s.group, s.kind, "shop", s.name): true}
				for _, e := range r.GetEdges() {
					ends[e.GetFrom()], ends[e.GetTo()] = true, true
				}
				for _, n := range r.GetNodes() {
					if !ends[n.GetId()] || !who.visible(n.GetId()) || (n.GetCached() && n.GetUid() == "") {
						t.Errorf("node %v: not an edge's end, hidden, or cached without uid", n)
					}
					delete(ends, n.GetId())
				}
				if len(ends) > 0 {
					t.Errorf("edges name nodes not answered: %v", ends)
				}
			})
		}
	}

	// kubectl through the hub, with each caller's token.
	kubectl := func(tok string) func(args ...string) ([]string, error) {
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: rest, TokenFile: filepath.Join(dir, strings.TrimSuffix(tok, "-token")+".token"),
			CAFile: filepath.Join(dir, "ca.crt"), Output: kc}, io.Discard); err != nil {
			t.Fatal(err)
		}
		cache := t.TempDir()
		return func(args ...string) ([]string, error) {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--cache-dir", cache}, args...)...).CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("kubectl %v: %v\n%s", args, err, out)
			}
			return rows(string(out))
		}
	}
	// Pods by relation, from the members' edges: a relation counts only
	// through objects the caller reads (visible), so it tells nothing of
	// the others.
	has := func(typ, from, to string) bool { return slices.Contains(edges, edge{typ, from, to}) }
	var podIDs []string
	for _, e := range edges {
		for _, n := range []string{e.from, e.to} {
			if strings.Contains(n, "//Pod/") && !slices.Contains(podIDs, n) {
				podIDs = append(podIDs, n)
			}
		}
	}
	cl := func(pod string) string { return strings.Split(pod, "/")[0] }
	cases := []struct {
		sel   string
		match func(pod string, visible func(string) bool) bool
	}{
		{"fleetview.io/ownedBy=Deployment/web", func(pod string, v func(string) bool) bool {
			dep := id(cl(pod), "apps", "Deployment", "shop", "web")
			for _, e := range edges {
				if e.typ == "owner" && e.from == pod && v(e.to) && v(dep) && has("owner", e.to, dep) {
					return true
				}
			}
			return false
		}},
		{"fleetview.io/ownedBy=ReplicaSet/web-7d9f", func(pod string, v func(string) bool) bool {
			rs := id(cl(pod), "apps", "ReplicaSet", "shop", "web-7d9f")
			return v(rs) && has("owner", pod, rs)
		}},
		{"fleetview.io/selectedBy=Service/web", func(pod string, v func(string) bool) bool {
			svc := id(cl(pod), "", "Service", "shop", "web")
			return v(svc) && has("selects", svc, pod)
		}},
		{"fleetview.io/references=Secret/db", func(pod string, v func(string) bool) bool {
			sec := id(cl(pod), "", "Secret", "shop", "db")
			return v(sec) && has("references", pod, sec)
		}},
		{"fleetview.io/references=ConfigMap/web-config", func(pod string, v func(string) bool) bool {
			cm := id(cl(pod), "", "ConfigMap", "shop", "web-config")
			return v(cm) && has("references", pod, cm)
		}},
	}
	for _, who := range []struct {
		tok     string
		visible func(string) bool
	}{{"admin-token", all}, {"carol-token", carolSees}} {
		k := kubectl(who.tok)
		proved := false
		for _, tc := range cases {
			var want []string
			for _, pod := range podIDs {
				if who.visible(pod) && tc.match(pod, who.visible) {
					p := strings.Split(pod, "/")
					want = append(want, p[0]+"/"+p[3]+"/"+p[4])
				}
			}
			slices.Sort(want)
			proved = proved || len(want) > 0
			t.Run(who.tok+" kubectl "+tc.sel, func(t *testing.T) {
				if who.tok == "admin-token" && len(want) == 0 {
					t.Fatal("no Pod expected: the case proves nothing")
				}
				got, err := k("get", "pods", "-A", "--field-selector", tc.sel)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("kubectl --field-selector %s: %v, want %v", tc.sel, got, want)
				}
			})
		}
		if !proved {
			t.Errorf("%s: no kubectl case expects a Pod", who.tok)
		}
	}
	t.Run("member RBAC: frank's related trees hold what member1's RBAC lets him read", func(t *testing.T) {
		rs := make([]relatedStart, len(starts))
		for i, s := range starts {
			rs[i] = relatedStart(s)
		}
		checkMemberRBACRelated(t, ctx, fleet, edges, rs)
	})
	t.Run("a relation field with != is a 400 naming it", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rest+"/api/v1/pods?fieldSelector="+url.QueryEscape("fleetview.io/ownedBy!=Deployment/web"), nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "only = and == are supported") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
}

// rows reads kubectl's table as sorted cluster/namespace/name.
func rows(out string) ([]string, error) {
	if strings.HasPrefix(strings.TrimSpace(out), "No resources found") {
		return nil, nil
	}
	table := fixture.TableRows(out)
	if len(table) == 0 || len(table[0]) < 3 || !slices.Equal(table[0][:3], []string{"NAMESPACE", "CLUSTER", "NAME"}) {
		return nil, fmt.Errorf("no NAMESPACE CLUSTER NAME table:\n%s", out)
	}
	var got []string
	for _, r := range table[1:] {
		got = append(got, r[1]+"/"+r[0]+"/"+r[2])
	}
	slices.Sort(got)
	return got, nil
}
