package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/registry"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RegistryRequest builds a registry for every cluster from "apiVersion:Kind"
// selectors.
func RegistryRequest(t testing.TB, name string, selectors ...string) *fleetviewv1.ApplyRegistryRequest {
	t.Helper()
	var sels []any
	for _, s := range selectors {
		av, kind, _ := strings.Cut(s, ":")
		sels = append(sels, map[string]any{"apiVersion": av, "kind": kind})
	}
	reg, err := structpb.NewStruct(map[string]any{
		"apiVersion": "fleetview.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"targetCluster": map[string]any{}, "resourceSelectors": sels},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fleetviewv1.ApplyRegistryRequest{Registry: reg}
}

func StructpbValue(v any) (*structpb.Value, error) { return structpb.NewValue(v) }

func RegistryFor(name string, clusters []string, sels ...registry.ResourceSelector) *registry.ResourceRegistry {
	return &registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: registry.ResourceRegistrySpec{TargetCluster: registry.ClusterAffinity{ClusterNames: clusters}, ResourceSelectors: sels}}
}

func Sel(apiVersion, kind, ns string) registry.ResourceSelector {
	return registry.ResourceSelector{APIVersion: apiVersion, Kind: kind, Namespace: ns}
}

func Labels(app string) map[string]string { return map[string]string{"app": app} }

func Pod(ns, name, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: Labels(app),
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"big":"blob"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/" + app + ":1"}}},
	}
}

func PodTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: Labels(app)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/" + app + ":1"}}},
	}
}

func Deployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: Labels(name)},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: Labels(name)}, Template: PodTemplate(name)}}
}

// MustOK returns a checker for (object, error) results.
func MustOK(t *testing.T) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Ref is what the tests compare: where an object is and what it is called.
type Ref struct{ Cluster, Namespace, Name string }

func (r Ref) String() string { return r.Cluster + ":" + r.Namespace + "/" + r.Name }

func Refs(rs ...Ref) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	sort.Strings(out)
	return out
}

// ObjectRef checks an object's cache-source annotations and names it.
func ObjectRef(obj map[string]any) (Ref, error) {
	md, _ := obj["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	c1, _ := ann["fleetview.io/cluster"].(string)
	c2, _ := ann["resource.karmada.io/cached-from-cluster"].(string)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	if c1 == "" || c1 != c2 {
		return Ref{}, fmt.Errorf("%s/%s: cache-source annotations %q and %q", ns, name, c1, c2)
	}
	if _, ok := md["managedFields"]; ok {
		return Ref{}, fmt.Errorf("%s/%s: managedFields not pruned", ns, name)
	}
	if _, ok := ann["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		return Ref{}, fmt.Errorf("%s/%s: last-applied-configuration not pruned", ns, name)
	}
	return Ref{Cluster: c1, Namespace: ns, Name: name}, nil
}

// RawMap decodes an object the query API returned as its stored JSON (the
// default form); nil when it is not a JSON object, which objectRef refuses.
func RawMap(b []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func GRPCList(ctx context.Context, fv *Fleetview, req *fleetviewv1.ListRequest) ([]string, error) {
	resp, err := fv.Query.List(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []Ref
	for _, it := range resp.GetRawItems() {
		r, err := ObjectRef(RawMap(it))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if resp.GetResourceVersion() == "" {
		return nil, fmt.Errorf("list without resourceVersion")
	}
	return Refs(out...), nil
}

func RESTList(fv *Fleetview, path string) ([]string, error) {
	var body struct {
		Items           []map[string]any `json:"items"`
		ResourceVersion string           `json:"resourceVersion"`
	}
	if _, err := fv.RESTGet(path, &body); err != nil {
		return nil, err
	}
	var out []Ref
	for _, it := range body.Items {
		r, err := ObjectRef(it)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if body.ResourceVersion == "" {
		return nil, fmt.Errorf("list without resourceVersion")
	}
	return Refs(out...), nil
}

func SameSet(got, want []string) error {
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

// KubectlBin is Debian's kubectl (scripts/test.sh installs it).
const KubectlBin = "/usr/bin/kubectl"

func QPod(ns, name, app, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: Labels(app),
			Annotations: map[string]string{"team": "owner-" + app}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.example/" + app + ":1"}}},
	}
}

func CreateNS(t *testing.T, ctx context.Context, fleet *harness.Fleet, names ...string) {
	t.Helper()
	must := MustOK(t)
	for _, c := range fleet.Clusters() {
		for _, ns := range names {
			must(c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
		}
	}
}

var CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
