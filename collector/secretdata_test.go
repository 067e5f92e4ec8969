package collector

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/restmapper"
	clienttesting "k8s.io/client-go/testing"

	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
)

func testRegistry(name string, data bool, clusters []string, namespaces ...string) *registry.ResourceRegistry {
	r := &registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.IncludeSecretData = data
	r.Spec.TargetCluster.ClusterNames = clusters
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		r.Spec.ResourceSelectors = append(r.Spec.ResourceSelectors, registry.ResourceSelector{APIVersion: "v1", Kind: "Secret", Namespace: ns})
	}
	return r
}

// TestSecretDataScopedToTheRegistry: one registry's includeSecretData
// keeps data only in the namespaces it selects, in the clusters it
// targets; another registry watching more namespaces of Secrets,
// metadata-only, does not inherit the opt-in.
func TestSecretDataScopedToTheRegistry(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "secrets", Kind: "Secret", Namespaced: true}}},
	}}}
	cached := memory.NewMemCacheClient(disc)
	c := &Collector{cfg: Config{Cluster: "m1"}, info: registry.ClusterInfo{Name: "m1"}, cached: cached, rm: restmapper.NewDeferredDiscoveryRESTMapper(cached)}
	cases := []struct {
		name    string
		regs    []*registry.ResourceRegistry
		watched []string // nil: every namespace
		keeps   []string // namespaces whose Secrets keep data
		strips  []string
		anyData bool
	}{
		{"opt-in in one namespace, metadata everywhere",
			[]*registry.ResourceRegistry{testRegistry("vault", true, nil, "vault"), testRegistry("all", false, nil)},
			nil, []string{"vault"}, []string{"default", "kube-system", ""}, true},
		{"opt-in for another cluster does not apply",
			[]*registry.ResourceRegistry{testRegistry("elsewhere", true, []string{"m2"}), testRegistry("all", false, nil)},
			nil, nil, []string{"vault", "default"}, false},
		{"two namespaced registries",
			[]*registry.ResourceRegistry{testRegistry("vault", true, nil, "vault", "certs"), testRegistry("app", false, nil, "app")},
			[]string{"app", "certs", "vault"}, []string{"certs", "vault"}, []string{"app"}, true},
		{"opt-in for all namespaces",
			[]*registry.ResourceRegistry{testRegistry("everything", true, nil), testRegistry("app", false, nil, "app")},
			nil, []string{"app", "vault", "default"}, nil, true},
		{"no opt-in", []*registry.ResourceRegistry{testRegistry("all", false, nil)}, nil, nil, []string{"vault"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, err := c.wants(tc.regs)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := out[secretsGVR]
			if !ok {
				t.Fatalf("secrets not wanted: %v", out)
			}
			if !slices.Equal(w.namespaces, tc.watched) || (w.namespaces == nil) != (tc.watched == nil) {
				t.Fatalf("watched namespaces %v, want %v", w.namespaces, tc.watched)
			}
			for _, ns := range tc.keeps {
				if !w.keepsData(ns) {
					t.Errorf("Secrets in %q lose the data their registry opted into", ns)
				}
			}
			for _, ns := range tc.strips {
				if w.keepsData(ns) {
					t.Errorf("Secrets in %q keep data no registry selecting them opted into", ns)
				}
			}
			if w.keepsAnyData() != tc.anyData {
				t.Errorf("inventory secretData %v, want %v", w.keepsAnyData(), tc.anyData)
			}
		})
	}
}

// TestSecretDataPerNamespaceInTheMessage: one sync publishes Secrets of
// the opted-in namespace with their data and the others stripped.
func TestSecretDataPerNamespaceInTheMessage(t *testing.T) {
	ctx := context.Background()
	s, rec := newTestSync(secretsGVR, false)
	s.w.secretData = dataScope{namespaces: []string{"vault"}}
	for i, ns := range []string{"vault", "default"} {
		m, b := obj("u"+ns, ns, "s", "1")
		if err := s.upsert(ctx, m, b, nil, 1); err != nil {
			t.Fatal(err)
		}
		msg := rec.msgs[i]
		ev, err := stream.Decode(msg.Subject, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		keep := ns == "vault"
		hasData := strings.Contains(string(ev.GetObject()), `"data"`)
		kept := msg.Header.Get(stream.HdrSecretData) == stream.SecretDataKept
		if hasData != keep || kept != keep {
			t.Errorf("namespace %s: data in object %v, header %v; want %v", ns, hasData, kept, keep)
		}
	}
	if got := (want{gvr: secretsGVR, secretData: dataScope{namespaces: []string{"a"}}}); got.equal(want{gvr: secretsGVR, secretData: dataScope{namespaces: []string{"b"}}}) {
		t.Fatal("a changed opt-in scope must restart the sync (republishing Secrets)")
	}
}
