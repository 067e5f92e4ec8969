package catalog

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
)

var (
	pods    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gadgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
)

// selecting is a registry selecting kinds (apiVersion/Kind) in every cluster.
func selecting(kinds ...string) *registry.ResourceRegistry {
	r := &registry.ResourceRegistry{}
	r.Name = "r"
	for _, k := range kinds {
		av, kind, _ := strings.Cut(k, " ")
		r.Spec.ResourceSelectors = append(r.Spec.ResourceSelectors, registry.ResourceSelector{APIVersion: av, Kind: kind})
	}
	return r
}

func rs(gvr schema.GroupVersionResource, kind string, namespaced bool, short ...string) inventory.ResourceState {
	return inventory.ResourceState{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Kind: kind, Namespaced: namespaced, ShortNames: short, Synced: true}
}

func rec(name string, res ...inventory.ResourceState) *inventory.Cluster {
	return &inventory.Cluster{Name: name, Resources: res}
}

func build(recs []*inventory.Cluster, regs ...*registry.ResourceRegistry) snapshotData {
	judged := map[string]*clusterClaims{}
	for _, r := range recs {
		judged[r.Name] = claimsOf(r, regs)
	}
	return resolve(judged)
}

// want is one expectation on the resolved catalog.
type want struct {
	gvr        schema.GroupVersionResource
	served     bool
	kind       string
	namespaced bool
	short      []string
	clusters   []string
	// marked are the clusters whose copy is marked, not followed.
	marked []string
}

func TestTrustRules(t *testing.T) {
	honest := func(name string) *inventory.Cluster {
		return rec(name, rs(pods, "Pod", true, "po"), rs(widgets, "Widget", true, "wd", "po"))
	}
	for _, tc := range []struct {
		name string
		recs []*inventory.Cluster
		regs []*registry.ResourceRegistry
		want []want
	}{{
		name: "a built-in's kind, scope and short names are the hub's, whatever a record says",
		recs: []*inventory.Cluster{rec("member1", rs(pods, "Secret", false, "po", "svc", "deploy")), honest("member2"), honest("member3")},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod", "v1 Secret", "example.com/v1 Widget")},
		want: []want{{gvr: pods, served: true, kind: "Pod", namespaced: true, short: []string{"po"}, clusters: []string{"member2", "member3"}, marked: []string{"member1"}}},
	}, {
		name: "the forger alone still cannot change a built-in",
		recs: []*inventory.Cluster{rec("member1", rs(pods, "Pod", false, "svc"))},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod")},
		want: []want{{gvr: pods, served: false, marked: []string{"member1"}}},
	}, {
		name: "a built-in's short names come from the hub, not the record",
		recs: []*inventory.Cluster{rec("member1", rs(pods, "Pod", true, "svc", "deploy"))},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod")},
		want: []want{{gvr: pods, served: true, kind: "Pod", namespaced: true, short: []string{"po"}, clusters: []string{"member1"}}},
	}, {
		name: "a resource no registry selects for the cluster is not followed",
		recs: []*inventory.Cluster{rec("member1", rs(pods, "Pod", true), rs(widgets, "Widget", true))},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod")},
		want: []want{{gvr: widgets, served: false, marked: []string{"member1"}}, {gvr: pods, served: true, kind: "Pod", namespaced: true, short: []string{"po"}, clusters: []string{"member1"}}},
	}, {
		name: "a custom resource takes the majority's kind and scope; the minority is marked",
		recs: []*inventory.Cluster{rec("member1", rs(widgets, "Widget", false, "wd")), honest("member2"), honest("member3")},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod", "example.com/v1 Widget")},
		want: []want{{gvr: widgets, served: true, kind: "Widget", namespaced: true, short: []string{"wd"}, clusters: []string{"member2", "member3"}, marked: []string{"member1"}}},
	}, {
		name: "a tie fails closed: served by none, all marked",
		recs: []*inventory.Cluster{rec("member1", rs(widgets, "Widget", false)), honest("member2")},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod", "example.com/v1 Widget")},
		want: []want{{gvr: widgets, served: false, marked: []string{"member1", "member2"}}},
	}, {
		name: "custom short names are those all agree on, less the built-ins' names",
		recs: []*inventory.Cluster{
			rec("member1", rs(widgets, "Widget", true, "wd", "w", "po", "pod")),
			rec("member2", rs(widgets, "Widget", true, "w", "wd", "pod", "secrets")),
		},
		regs: []*registry.ResourceRegistry{selecting("example.com/v1 Widget")},
		want: []want{{gvr: widgets, served: true, kind: "Widget", namespaced: true, short: []string{"wd", "w"}, clusters: []string{"member1", "member2"}}},
	}, {
		name: "a custom resource cannot take a built-in's kind",
		recs: []*inventory.Cluster{rec("member1", rs(schema.GroupVersionResource{Version: "v1", Resource: "fakes"}, "Secret", true))},
		regs: []*registry.ResourceRegistry{selecting("v1 Secret")},
		want: []want{{gvr: schema.GroupVersionResource{Version: "v1", Resource: "fakes"}, served: false, marked: []string{"member1"}}},
	}, {
		name: "one kind names one resource: the one more clusters serve",
		recs: []*inventory.Cluster{rec("member1", rs(gadgets, "Widget", true)), honest("member2"), honest("member3")},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod", "example.com/v1 Widget")},
		want: []want{
			{gvr: widgets, served: true, kind: "Widget", namespaced: true, short: []string{"wd"}, clusters: []string{"member2", "member3"}},
			{gvr: gadgets, served: false, marked: []string{"member1"}},
		},
	}, {
		name: "two custom resources sharing a short name lose it",
		recs: []*inventory.Cluster{rec("member1", rs(widgets, "Widget", true, "x", "wd"), rs(gadgets, "Gadget", true, "x", "gd"))},
		regs: []*registry.ResourceRegistry{selecting("example.com/v1 Widget", "example.com/v1 Gadget")},
		want: []want{
			{gvr: widgets, served: true, kind: "Widget", namespaced: true, short: []string{"wd"}, clusters: []string{"member1"}},
			{gvr: gadgets, served: true, kind: "Gadget", namespaced: true, short: []string{"gd"}, clusters: []string{"member1"}},
		},
	}, {
		name: "a resource the cluster does not serve is neither claimed nor marked",
		recs: []*inventory.Cluster{rec("member1", inventory.ResourceState{Version: "v1", Resource: "pods", Kind: "Pod", Message: "not served"})},
		regs: []*registry.ResourceRegistry{selecting("v1 Pod")},
		want: []want{{gvr: pods, served: false}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := build(tc.recs, tc.regs...)
			for _, w := range tc.want {
				r, ok := got.resources[w.gvr]
				if ok != w.served {
					t.Fatalf("%s served = %v, want %v (%+v)", w.gvr, ok, w.served, r)
				}
				if ok {
					if r.Kind != w.kind || r.Namespaced != w.namespaced || !slices.Equal(r.ShortNames, w.short) || !slices.Equal(r.Clusters, w.clusters) {
						t.Errorf("%s = kind %s namespaced %v short %v clusters %v; want %s %v %v %v", w.gvr, r.Kind, r.Namespaced, r.ShortNames, r.Clusters, w.kind, w.namespaced, w.short, w.clusters)
					}
				}
				var marked []string
				for _, c := range tc.recs {
					why := got.clusters[c.Name].Marks[w.gvr]
					followed := slices.Contains(got.clusters[c.Name].Followed, w.gvr)
					if why != "" {
						marked = append(marked, c.Name)
						if followed {
							t.Errorf("%s: %s is marked (%s) yet followed", c.Name, w.gvr, why)
						}
					}
				}
				if !slices.Equal(marked, w.marked) {
					t.Errorf("%s marked in %v, want %v", w.gvr, marked, w.marked)
				}
			}
		})
	}
}

// Every built-in's kind is one client-go's scheme knows in that group, so
// the table cannot drift into a kind no kube-apiserver serves.
func TestBuiltinKindsAreClientGos(t *testing.T) {
	known := map[schema.GroupKind]bool{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		known[gvk.GroupKind()] = true
	}
	for gr, b := range builtins {
		gk := schema.GroupKind{Group: gr.Group, Kind: b.kind}
		if gr.Group == "apiextensions.k8s.io" || gr.Group == "apiregistration.k8s.io" {
			continue // served by kube-apiserver, typed outside client-go's scheme
		}
		if !known[gk] {
			t.Errorf("%s: kind %s is not in client-go's scheme", gr, b.kind)
		}
	}
}

func TestColumnsByMajority(t *testing.T) {
	v1 := []inventory.Column{{Name: "Name", Type: "string", Format: "name"}, {Name: "Ready", Type: "string"}, {Name: "Age", Type: "string"}}
	v2 := []inventory.Column{{Name: "Name", Type: "string", Format: "name"}, {Name: "Status", Type: "string"}, {Name: "Age", Type: "string"}}
	v1OtherText := slices.Clone(v1)
	v1OtherText[1].Description = "worded differently"
	with := func(name string, gvr schema.GroupVersionResource, kind string, cols []inventory.Column) *inventory.Cluster {
		r := rs(gvr, kind, true)
		r.Columns = cols
		return rec(name, r)
	}
	regs := selecting("v1 Pod", "example.com/v1 Widget", "example.com/v1 Gizmo")
	for _, tc := range []struct {
		name string
		recs []*inventory.Cluster
		want []inventory.Column
	}{
		{"one cluster", []*inventory.Cluster{with("a", pods, "Pod", v1)}, v1},
		{"most clusters win", []*inventory.Cluster{with("a", pods, "Pod", v2), with("b", pods, "Pod", v1), with("c", pods, "Pod", v1)}, v1},
		{"descriptions do not count", []*inventory.Cluster{with("a", pods, "Pod", v2), with("b", pods, "Pod", v1), with("c", pods, "Pod", v1OtherText)}, v1},
		{"a tie is nobody's", []*inventory.Cluster{with("a", pods, "Pod", v1), with("b", pods, "Pod", v2)}, nil},
		{"clusters without columns do not vote", []*inventory.Cluster{with("a", pods, "Pod", nil), with("b", pods, "Pod", nil), with("c", pods, "Pod", v2)}, v2},
		{"a custom resource too", []*inventory.Cluster{with("a", widgets, "Widget", v2), with("b", widgets, "Widget", v2), with("c", widgets, "Widget", v1)}, v2},
		// A cluster outvoted on the kind does not vote on the columns.
		{"only the winning kind votes", []*inventory.Cluster{with("a", widgets, "Widget", v2), with("b", widgets, "Widget", v2), with("c", widgets, "Gizmo", v1),
			with("d", widgets, "Gizmo", v1), with("e", widgets, "Gizmo", v1)}, v1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := build(tc.recs, regs)
			gvr := tc.recs[0].Resources[0]
			r := d.resources[schema.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}]
			if r == nil {
				t.Fatalf("not served: %+v", d.resources)
			}
			if !slices.EqualFunc(r.Columns, tc.want, func(a, b inventory.Column) bool { return a.Name == b.Name && a.Type == b.Type }) {
				t.Fatalf("columns %+v, want %+v", r.Columns, tc.want)
			}
			// Each cluster keeps its own, for a Table of that cluster alone.
			for _, rc := range tc.recs {
				c := d.clusters[rc.Name]
				gvr := schema.GroupVersionResource{Group: rc.Resources[0].Group, Version: rc.Resources[0].Version, Resource: rc.Resources[0].Resource}
				if slices.Contains(c.Followed, gvr) && len(c.Columns[gvr]) != len(rc.Resources[0].Columns) {
					t.Fatalf("cluster %s columns %+v, want its record's %+v", rc.Name, c.Columns[gvr], rc.Resources[0].Columns)
				}
			}
		})
	}
}

// BenchmarkResolve resolves the catalog of n clusters serving Pods and
// ConfigMaps with kubectl's columns, as the catalog does (coalesced, at
// most every publishEvery) while a fleet's records change. Its cost per
// cluster at 2,000 against 3 is what docs/benchmarks/fleet.md records.
func BenchmarkResolve(b *testing.B) {
	cols := []inventory.Column{{Name: "Name", Type: "string", Format: "name"}, {Name: "Ready", Type: "string"}, {Name: "Status", Type: "string"}, {Name: "Age", Type: "string"}}
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	regs := []*registry.ResourceRegistry{selecting("v1 Pod", "v1 ConfigMap")}
	for _, n := range []int{3, 2000} {
		judged := map[string]*clusterClaims{}
		for i := range n {
			p, c := rs(pods, "Pod", true, "po"), rs(configmaps, "ConfigMap", true, "cm")
			p.Columns, c.Columns = cols, cols[:1]
			r := rec(fmt.Sprintf("c%04d", i), p, c)
			judged[r.Name] = claimsOf(r, regs)
		}
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			for b.Loop() {
				if d := resolve(judged); len(d.resources) != 2 {
					b.Fatalf("%d resources resolved, want 2", len(d.resources))
				}
			}
		})
	}
}
