package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// helmBinary finds helm on PATH or where scripts/test.sh installs it.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("FLEETVIEW_CACHE")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "fleetview")
	}
	p := filepath.Join(cache, "tools", "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm is required (scripts/test.sh installs it into %s): %v", filepath.Dir(p), err)
	}
	return p
}

func helmTemplate(t *testing.T, helm string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "fv", "../deploy/helm/fleetview", "--namespace", "fleetview"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return errb.String(), err
	}
	return out.String(), nil
}

// TestHelmChart renders the chart in both modes and has a real
// kube-apiserver validate every manifest (server-side dry run), and checks
// the chart refuses insecure or incomplete values.
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	if out, err := exec.Command(helm, "lint", "../deploy/helm/fleetview").CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	fleet := startFleet(t, "chart")
	c := fleet.Cluster("chart")
	ctx := context.Background()
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetview"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	for _, tc := range []struct {
		name  string
		args  []string
		kinds []string
	}{
		{"hub", nil, []string{"Service", "StatefulSet"}}, // helm orders by kind
		{"collector", []string{"--set", "mode=collector", "--set", "collector.clusterName=member1", "--set", "collector.labels.env=prod"},
			[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, helm, tc.args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
			var kinds []string
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if len(u.Object) == 0 {
					continue
				}
				kinds = append(kinds, u.GetKind())
				gvk := u.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s: %v", gvk, err)
				}
				ri := c.Dynamic().Resource(m.Resource)
				var rc interface {
					Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
				} = ri
				if m.Scope.Name() == "namespace" {
					ns := u.GetNamespace()
					if ns == "" {
						ns = "fleetview"
					}
					rc = ri.Namespace(ns)
				}
				if _, err := rc.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
					t.Fatalf("the apiserver refuses %s %s: %v", u.GetKind(), u.GetName(), err)
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Fatalf("rendered %v, want %v", kinds, tc.kinds)
			}
			if tc.name == "hub" && (!strings.Contains(out, "--nats-token-file") || !strings.Contains(out, "--authorization-policy-file")) {
				t.Fatalf("hub without NATS token or API policy:\n%s", out)
			}
		})
	}
	t.Run("refuses insecure or incomplete values", func(t *testing.T) {
		if out, err := helmTemplate(t, helm, "--set", "hub.authSecret="); err == nil || !strings.Contains(out, "hub.authSecret is required") {
			t.Fatalf("hub without auth rendered: %v\n%s", err, out)
		}
		if out, err := helmTemplate(t, helm, "--set", "mode=collector"); err == nil || !strings.Contains(out, "collector.clusterName is required") {
			t.Fatalf("collector without a cluster name rendered: %v\n%s", err, out)
		}
	})
}
