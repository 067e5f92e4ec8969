package collector

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/fleetview/fleetview/internal/registry"
)

// fakeDiscovery serves preferred lists and, for one-version wildcards,
// every version's list; failed is returned beside them as a partial
// failure.
type fakeDiscovery struct {
	preferred []*metav1.APIResourceList
	versions  map[string]*metav1.APIResourceList
	failed    error
}

func (f fakeDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return f.preferred, f.failed
}

func (f fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if l, ok := f.versions[gv]; ok {
		return l, nil
	}
	return nil, errors.New("not found")
}

var listWatch = []string{"get", "list", "watch"}

func memberDiscovery() fakeDiscovery {
	core := &metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: listWatch},
		{Name: "pods/log", Kind: "Pod", Namespaced: true, Verbs: []string{"get"}},
		{Name: "events", Kind: "Event", Namespaced: true, Verbs: listWatch},
		{Name: "namespaces", Kind: "Namespace", Verbs: listWatch},
		{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
		{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: []string{"get", "list"}},
	}}
	apps := &metav1.APIResourceList{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: listWatch},
		{Name: "deployments/status", Kind: "Deployment", Namespaced: true, Verbs: listWatch},
	}}
	leases := &metav1.APIResourceList{GroupVersion: "coordination.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "leases", Kind: "Lease", Namespaced: true, Verbs: listWatch},
	}}
	widgets := &metav1.APIResourceList{GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listWatch},
		{Name: "gizmos", Kind: "Gizmo", Verbs: listWatch},
	}}
	widgetsV1 := &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listWatch},
	}}
	return fakeDiscovery{
		preferred: []*metav1.APIResourceList{core, apps, leases, widgets},
		versions:  map[string]*metav1.APIResourceList{"v1": core, "apps/v1": apps, "example.com/v1": widgetsV1, "example.com/v2": widgets},
	}
}

func sel(apiVersion, kind string) registry.ResourceSelector {
	return registry.ResourceSelector{APIVersion: apiVersion, Kind: kind}
}

func TestExpand(t *testing.T) {
	partial := &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("503")}}
	tests := []struct {
		name     string
		disc     fakeDiscovery
		sels     []registry.ResourceSelector
		want     []registry.ResourceSelector
		wildcard bool
		left     []string // substrings, one per left line, in order
	}{
		{name: "exact selectors read no discovery", disc: fakeDiscovery{failed: errors.New("must not be read")},
			sels: []registry.ResourceSelector{sel("v1", "Pod"), {APIVersion: "apps/v1", Kind: "Deployment", Namespaces: []string{"a", "b"}}},
			want: []registry.ResourceSelector{sel("v1", "Pod"), {APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a"}, {APIVersion: "apps/v1", Kind: "Deployment", Namespace: "b"}}},
		{name: "every kind", disc: memberDiscovery(), sels: []registry.ResourceSelector{sel("*", "*")}, wildcard: true,
			want: []registry.ResourceSelector{sel("v1", "Pod"), sel("v1", "Namespace"), sel("apps/v1", "Deployment"), sel("example.com/v2", "Widget"), sel("example.com/v2", "Gizmo")},
			left: []string{"Binding v1, ComponentStatus v1: cannot be listed and watched", "Event v1: left out of wildcards unless named", "Lease coordination.k8s.io/v1: left out of wildcards unless named"}},
		{name: "a named kind is not expanded again", disc: memberDiscovery(), sels: []registry.ResourceSelector{sel("*", "*"), sel("example.com/v1", "Widget"), sel("v1", "Event")}, wildcard: true,
			want: []registry.ResourceSelector{sel("example.com/v1", "Widget"), sel("v1", "Event"), sel("v1", "Pod"), sel("v1", "Namespace"), sel("apps/v1", "Deployment"), sel("example.com/v2", "Gizmo")},
			left: []string{"cannot be listed and watched", "Lease"}},
		{name: "custom resources in namespaces", disc: memberDiscovery(), sels: []registry.ResourceSelector{{APIVersion: "*", Kind: "*", CustomResources: true, Namespaces: []string{"x"}}}, wildcard: true,
			want: []registry.ResourceSelector{{APIVersion: "example.com/v2", Kind: "Widget", Namespace: "x"}},
			left: []string{"Gizmo example.com/v2: cluster-scoped, and the selector names namespaces"}},
		{name: "one group with an exclude", disc: memberDiscovery(), sels: []registry.ResourceSelector{{APIVersion: "core/*", Kind: "*", Exclude: []registry.KindRef{{Kind: "Namespace"}}}}, wildcard: true,
			want: []registry.ResourceSelector{sel("v1", "Pod")},
			left: []string{"cannot be listed and watched", "Namespace v1: excluded by the selector", "Event v1: left out"}},
		{name: "one version", disc: memberDiscovery(), sels: []registry.ResourceSelector{sel("example.com/v1", "*")}, wildcard: true,
			want: []registry.ResourceSelector{sel("example.com/v1", "Widget")}},
		{name: "partial discovery", disc: func() fakeDiscovery { d := memberDiscovery(); d.failed = partial; return d }(),
			sels: []registry.ResourceSelector{sel("apps/*", "*")}, wildcard: true,
			want: []registry.ResourceSelector{sel("apps/v1", "Deployment")},
			left: []string{"discovery failed for some groups"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := expand(tt.disc, tt.sels)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(e.exact, tt.want) {
				t.Errorf("exact = %+v\nwant    %+v", e.exact, tt.want)
			}
			if e.wildcard != tt.wildcard {
				t.Errorf("wildcard = %v, want %v", e.wildcard, tt.wildcard)
			}
			if len(e.left) != len(tt.left) {
				t.Fatalf("left = %q, want %d lines like %q", e.left, len(tt.left), tt.left)
			}
			for i, l := range e.left {
				if !strings.Contains(l, tt.left[i]) {
					t.Errorf("left[%d] = %q, want it to say %q", i, l, tt.left[i])
				}
			}
		})
	}
}

func TestExpandDiscoveryDown(t *testing.T) {
	_, err := expand(fakeDiscovery{failed: errors.New("connection refused")}, []registry.ResourceSelector{sel("*", "*")})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("expand = %v, want the discovery error", err)
	}
}

// What a wildcard stood for, as the registry's status and the log say it:
// the kinds it became, each one list and watch of the member.
func TestExpandSaysWhatEachWildcardStoodFor(t *testing.T) {
	e, err := expand(memberDiscovery(), []registry.ResourceSelector{sel("*", "*"), sel("v1", "Pod"), sel("apps/*", "*")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"selector 0 (* *): 4 kinds, one list and watch of this cluster each",
		"selector 2 (apps/* *): 1 kinds, one list and watch of this cluster each",
	}
	if !reflect.DeepEqual(e.expanded, want) {
		t.Fatalf("expanded = %q\nwant       %q", e.expanded, want)
	}
}
