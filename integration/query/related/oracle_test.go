package related

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/internal/relations"
)

// edge is "type from -> to" with nodes as cluster/group/kind/ns/name,
// the ids the API answers.
type edge struct{ typ, from, to string }

func (e edge) String() string { return e.typ + " " + e.from + " -> " + e.to }

func id(cluster, group, kind, ns, name string) string {
	return strings.Join([]string{cluster, group, kind, ns, name}, "/")
}

// memberEdges are the relations of one member's objects in ns, computed
// from what its apiserver answers: owner references, the selectors of
// Services, Deployments and ReplicaSets over its Pods, and the objects
// Pods, Ingresses and PVCs name.
func memberEdges(t *testing.T, ctx context.Context, cluster string, cs kubernetes.Interface, ns string) []edge {
	t.Helper()
	var out []edge
	owners := func(group, kind, name string, refs []metav1.OwnerReference) {
		for _, r := range refs {
			g, _, _ := strings.Cut(r.APIVersion, "/")
			if !strings.Contains(r.APIVersion, "/") {
				g = ""
			}
			out = append(out, edge{"owner", id(cluster, group, kind, ns, name), id(cluster, g, r.Kind, ns, r.Name)})
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selects := func(group, kind, name string, sel labels.Selector) {
		for _, p := range pods.Items {
			if sel.Matches(labels.Set(p.Labels)) {
				out = append(out, edge{"selects", id(cluster, group, kind, ns, name), id(cluster, "", "Pod", ns, p.Name)})
			}
		}
	}
	for _, p := range pods.Items {
		owners("", "Pod", p.Name, p.OwnerReferences)
		from := id(cluster, "", "Pod", ns, p.Name)
		ref := func(kind, tns, name string) {
			if name != "" {
				out = append(out, edge{"references", from, id(cluster, "", kind, tns, name)})
			}
		}
		ref("Node", "", p.Spec.NodeName)
		ref("ServiceAccount", ns, p.Spec.ServiceAccountName)
		for _, v := range p.Spec.Volumes {
			if v.ConfigMap != nil {
				ref("ConfigMap", ns, v.ConfigMap.Name)
			}
			if v.Secret != nil {
				ref("Secret", ns, v.Secret.SecretName)
			}
			if v.PersistentVolumeClaim != nil {
				ref("PersistentVolumeClaim", ns, v.PersistentVolumeClaim.ClaimName)
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.ConfigMap != nil {
						ref("ConfigMap", ns, s.ConfigMap.Name)
					}
					if s.Secret != nil {
						ref("Secret", ns, s.Secret.Name)
					}
				}
			}
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil {
					ref("ConfigMap", ns, ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					ref("Secret", ns, ef.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					ref("ConfigMap", ns, e.ValueFrom.ConfigMapKeyRef.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref("Secret", ns, e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
		for _, s := range p.Spec.ImagePullSecrets {
			ref("Secret", ns, s.Name)
		}
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		owners("apps", "Deployment", d.Name, d.OwnerReferences)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		selects("apps", "Deployment", d.Name, sel)
	}
	rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rss.Items {
		owners("apps", "ReplicaSet", r.Name, r.OwnerReferences)
		sel, err := metav1.LabelSelectorAsSelector(r.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		selects("apps", "ReplicaSet", r.Name, sel)
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		owners("", "Service", s.Name, s.OwnerReferences)
		if len(s.Spec.Selector) > 0 {
			selects("", "Service", s.Name, labels.SelectorFromSet(s.Spec.Selector))
		}
	}
	ings, err := cs.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ings.Items {
		from := id(cluster, "networking.k8s.io", "Ingress", ns, in.Name)
		if b := in.Spec.DefaultBackend; b != nil && b.Service != nil {
			out = append(out, edge{"references", from, id(cluster, "", "Service", ns, b.Service.Name)})
		}
		for _, r := range in.Spec.Rules {
			if r.HTTP == nil {
				continue
			}
			for _, p := range r.HTTP.Paths {
				if p.Backend.Service != nil {
					out = append(out, edge{"references", from, id(cluster, "", "Service", ns, p.Backend.Service.Name)})
				}
			}
		}
	}
	pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pvcs.Items {
		if c.Spec.VolumeName != "" {
			out = append(out, edge{"references", id(cluster, "", "PersistentVolumeClaim", ns, c.Name), id(cluster, "", "PersistentVolume", "", c.Spec.VolumeName)})
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		owners("", "ConfigMap", c.Name, c.OwnerReferences)
	}
	return out
}

// expectRelated is the answer for start to depth over edges: every edge
// of a node less than depth hops away, where only nodes visible are
// followed or named, and an object every Pod of its namespace names
// (relations.Shared: kube-root-ca.crt, the default ServiceAccount) is
// named but not followed unless it is start, plus the copies of start
// (copies, visible ones).
func expectRelated(edges []edge, start string, depth int, visible func(id string) bool, copies []string) []string {
	dist := map[string]int{start: 0}
	frontier := []string{start}
	var got []string
	seen := map[edge]bool{}
	for d := 0; d < depth; d++ {
		var next []string
		for _, n := range frontier {
			for _, e := range edges {
				other := ""
				switch n {
				case e.from:
					other = e.to
				case e.to:
					other = e.from
				default:
					continue
				}
				if !visible(other) || seen[e] {
					continue
				}
				seen[e] = true
				got = append(got, e.String())
				if _, ok := dist[other]; !ok {
					dist[other] = d + 1
					if !shared(other) {
						next = append(next, other)
					}
				}
			}
		}
		frontier = next
	}
	for _, c := range copies {
		if visible(c) {
			got = append(got, edge{"copy", start, c}.String())
		}
	}
	slices.Sort(got)
	return slices.Compact(got)
}

// shared reports whether the node id is one relations.Shared names.
func shared(id string) bool {
	p := strings.Split(id, "/")
	return len(p) == 5 && relations.Shared(p[1], p[2], p[4])
}

func fmtEdges(es []string) string {
	return fmt.Sprintf("%d edges:\n  %s", len(es), strings.Join(es, "\n  "))
}
