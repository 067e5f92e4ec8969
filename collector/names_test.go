package collector

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/restmapper"
	clienttesting "k8s.io/client-go/testing"

	"github.com/fleetview/fleetview/internal/stream"
)

// The short names and categories a member's discovery reports for a wanted
// resource reach its inventory record, and never restart its sync.
func TestDiscoveryNamesReachTheInventory(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true, ShortNames: []string{"po"}, Categories: []string{"all"}},
			{Name: "secrets", Kind: "Secret", Namespaced: true},
		}},
		{GroupVersion: "stable.example.com/v1", APIResources: []metav1.APIResource{
			{Name: "crontabs", Kind: "CronTab", Namespaced: true, ShortNames: []string{"ct", "ctab"}, Categories: []string{"fvtest"}},
		}},
	}}}
	cached := memory.NewMemCacheClient(disc)
	rm := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	names := map[schema.GroupVersionResource]apiNames{}
	for _, gvk := range []schema.GroupVersionKind{{Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "Secret"}, {Group: "stable.example.com", Version: "v1", Kind: "CronTab"}} {
		m, err := rm.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		names[m.Resource] = discoveryNames(cached, m.Resource)
	}
	if got := discoveryNames(cached, schema.GroupVersionResource{Group: "nosuch.io", Version: "v1", Resource: "things"}); got.shortNames != nil || got.categories != nil {
		t.Fatalf("names of an unserved resource: %+v", got)
	}

	c := &Collector{cfg: Config{Cluster: "m1"}, running: map[schema.GroupVersionResource]*runningSync{}, names: names, m: &metrics{}}
	for gvr := range names {
		c.running[gvr] = &runningSync{rs: newResourceSync(resourceSyncConfig{cluster: "m1", w: want{gvr: gvr, kind: "K", namespaced: true},
			pub: &recorder{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ttl: stream.DefaultTombstoneTTL, m: c.m})}
	}
	got := map[string]string{}
	for _, r := range c.record(true, "").Resources {
		got[r.Resource] = strings.Join(r.ShortNames, ",") + ":" + strings.Join(r.Categories, ",")
	}
	expected := map[string]string{"pods": "po:all", "secrets": ":", "crontabs": "ct,ctab:fvtest"}
	for r, w := range expected {
		if got[r] != w {
			t.Errorf("inventory names of %s: %q, want %q", r, got[r], w)
		}
	}

	a := want{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true, names: apiNames{shortNames: []string{"po"}}}
	b := a
	b.names = apiNames{shortNames: []string{"po", "pod"}, categories: []string{"all"}}
	if !a.equal(b) {
		t.Fatal("an edited short name would restart the sync")
	}
}
