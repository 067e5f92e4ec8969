package kubeapi

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/queryapi/catalog"
)

// TestBuiltinTableMatchesKubeAPIServer checks the hub's own table of
// built-in resources (kind, scope, short names, categories), which the
// catalog trusts over any member's record, against a real kube-apiserver's
// discovery: every resource it serves that the table holds must match.
//
// Discovery only: it reads the package's shared members (their CronTab CRD
// is no built-in, so the table does not hold it).
func TestBuiltinTableMatchesKubeAPIServer(t *testing.T) {
	fleet := members.Get(t)
	_, lists, err := fleet.Cluster("member1").Clientset().Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			kind, namespaced, short, cats, ok := catalog.Builtin(schema.GroupResource{Group: gv.Group, Resource: r.Name})
			if !ok {
				continue
			}
			checked++
			if kind != r.Kind || namespaced != r.Namespaced || !slices.Equal(short, r.ShortNames) || !slices.Equal(cats, r.Categories) {
				t.Errorf("%s %s: table kind %s namespaced %v short %v categories %v; apiserver %s %v %v %v",
					gv, r.Name, kind, namespaced, short, cats, r.Kind, r.Namespaced, r.ShortNames, r.Categories)
			}
		}
	}
	if want := len(catalog.BuiltinResources()); checked < want*3/4 {
		t.Fatalf("only %d of the table's %d resources are served by the kube-apiserver", checked, want)
	}
	t.Logf("%d resources checked against kube-apiserver", checked)
}
