package registry

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSelects(t *testing.T) {
	var (
		deploy    = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
		deployB   = schema.GroupVersionKind{Group: "apps", Version: "v1beta1", Kind: "Deployment"}
		pod       = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
		event     = schema.GroupVersionKind{Version: "v1", Kind: "Event"}
		evEvent   = schema.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "Event"}
		lease     = schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
		widget    = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
		gadget    = schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Gadget"}
		crd       = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
		ingress   = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}
		gwIngress = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Ingress"}
	)
	tests := []struct {
		name    string
		sel     ResourceSelector
		gvk     schema.GroupVersionKind
		want    bool
		wantWhy string // a substring of why, when left out
	}{
		{"exact matches its one kind", ResourceSelector{APIVersion: "apps/v1", Kind: "Deployment"}, deploy, true, ""},
		{"exact is bound to its version", ResourceSelector{APIVersion: "apps/v1", Kind: "Deployment"}, deployB, false, ""},
		{"exact names Events", ResourceSelector{APIVersion: "v1", Kind: "Event"}, event, true, ""},
		{"every kind: a Deployment", ResourceSelector{APIVersion: "*", Kind: "*"}, deploy, true, ""},
		{"every kind: any version", ResourceSelector{APIVersion: "*", Kind: "*"}, deployB, true, ""},
		{"every kind: a CRD's kind", ResourceSelector{APIVersion: "*", Kind: "*"}, widget, true, ""},
		{"every kind leaves out Events", ResourceSelector{APIVersion: "*", Kind: "*"}, event, false, "high churn"},
		{"every kind leaves out events.k8s.io Events", ResourceSelector{APIVersion: "*", Kind: "*"}, evEvent, false, "high churn"},
		{"every kind leaves out Leases", ResourceSelector{APIVersion: "*", Kind: "*"}, lease, false, "leases"},
		{"a kind in every group names Events", ResourceSelector{APIVersion: "*", Kind: "Event"}, evEvent, true, ""},
		{"a kind in every group: other kinds", ResourceSelector{APIVersion: "*", Kind: "Ingress"}, deploy, false, ""},
		{"a kind in every group: two groups", ResourceSelector{APIVersion: "*", Kind: "Ingress"}, gwIngress, true, ""},
		{"a kind in every group: the built-in one", ResourceSelector{APIVersion: "*", Kind: "Ingress"}, ingress, true, ""},
		{"a group: its kind", ResourceSelector{APIVersion: "apps/*", Kind: "*"}, deployB, true, ""},
		{"a group: another group", ResourceSelector{APIVersion: "apps/*", Kind: "*"}, pod, false, ""},
		{"the core group", ResourceSelector{APIVersion: "core/*", Kind: "*"}, pod, true, ""},
		{"the core group: not apps", ResourceSelector{APIVersion: "core/*", Kind: "*"}, deploy, false, ""},
		{"the core group leaves out Events", ResourceSelector{APIVersion: "core/*", Kind: "*"}, event, false, "high churn"},
		{"a version's kinds", ResourceSelector{APIVersion: "apps/v1", Kind: "*"}, deploy, true, ""},
		{"a version's kinds: not another version", ResourceSelector{APIVersion: "apps/v1", Kind: "*"}, deployB, false, ""},
		{"a core version's kinds", ResourceSelector{APIVersion: "v1", Kind: "*"}, pod, true, ""},
		{"exclude by group", ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "apps"}}}, deploy, false, "excluded"},
		{"exclude by group: other groups", ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "apps"}}}, pod, true, ""},
		{"exclude the core group", ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "core"}}}, pod, false, "excluded"},
		{"exclude by kind in every group", ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Kind: "Ingress"}}}, gwIngress, false, "excluded"},
		{"exclude by group and kind", ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "networking.k8s.io", Kind: "Ingress"}}}, gwIngress, true, ""},
		{"custom resources: a CRD's kind", ResourceSelector{APIVersion: "*", Kind: "*", CustomResources: true}, gadget, true, ""},
		{"custom resources: a Gateway API kind", ResourceSelector{APIVersion: "*", Kind: "*", CustomResources: true}, gwIngress, true, ""},
		{"custom resources: not a built-in", ResourceSelector{APIVersion: "*", Kind: "*", CustomResources: true}, deploy, false, ""},
		{"custom resources: not CRDs themselves", ResourceSelector{APIVersion: "*", Kind: "*", CustomResources: true}, crd, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.sel.Selects(tt.gvk)
			if got != tt.want {
				t.Fatalf("Selects(%v) = %v (%q), want %v", tt.gvk, got, why, tt.want)
			}
			if tt.wantWhy == "" && why != "" || !strings.Contains(strings.ToLower(why), strings.ToLower(tt.wantWhy)) {
				t.Errorf("why = %q, want one saying %q", why, tt.wantWhy)
			}
		})
	}
}

func TestIsBuiltinGroup(t *testing.T) {
	for group, want := range map[string]bool{
		"": true, "apps": true, "batch": true, "networking.k8s.io": true, "rbac.authorization.k8s.io": true,
		"apiextensions.k8s.io": true, "apiregistration.k8s.io": true,
		"example.com": false, "gateway.networking.k8s.io": false, "metrics.k8s.io": false, "cluster.x-k8s.io": false,
	} {
		if got := IsBuiltinGroup(group); got != want {
			t.Errorf("IsBuiltinGroup(%q) = %v, want %v", group, got, want)
		}
	}
}
