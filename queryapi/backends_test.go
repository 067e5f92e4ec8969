package queryapi

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
)

// fakeBackends routes every resource to "os1" and reports ps.
type fakeBackends struct{ ps []query.BackendProblem }

func (f fakeBackends) Unreachable() []query.BackendProblem { return f.ps }
func (fakeBackends) BackendOf(string, schema.GroupVersionResource) (string, string) {
	return "os1", "opensearch http://os:9200"
}
func (fakeBackends) RegistryBackend(r *registry.ResourceRegistry) string {
	if r.Spec.BackendStore == nil {
		return ""
	}
	return "os1"
}

func TestBackendHealthShows(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	down := []query.BackendProblem{{Backend: "os1", Name: "opensearch http://os:9200", Err: "connection refused", Since: since}}
	withStore := &registry.ResourceRegistry{Spec: registry.ResourceRegistrySpec{BackendStore: &registry.BackendStoreConfig{
		OpenSearch: &registry.OpenSearchConfig{Addresses: []string{"http://os:9200"}}}}}
	for _, tc := range []struct {
		name      string
		b         BackendHealth
		reg       *registry.ResourceRegistry
		notReady  string // "" ready
		condition string // "" none
	}{
		{name: "no backend health", b: nil, reg: withStore},
		{name: "all reachable", b: fakeBackends{}, reg: withStore, condition: "True Reachable"},
		{name: "down", b: fakeBackends{ps: down}, reg: withStore,
			notReady:  "backend opensearch http://os:9200 unreachable since 10:00:00Z: connection refused",
			condition: "False Unreachable opensearch http://os:9200 unreachable since 10:00:00Z: connection refused"},
		{name: "down, registry on Badger", b: fakeBackends{ps: down}, reg: &registry.ResourceRegistry{},
			notReady: "backend opensearch http://os:9200 unreachable since 10:00:00Z: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := backendsNotReady(tc.b); got != tc.notReady {
				t.Errorf("readiness reason %q, want %q", got, tc.notReady)
			}
			copied := *tc.reg
			r := &copied
			withBackendCondition(r, tc.b, problems(tc.b))
			var got []string
			for _, c := range r.Status.Conditions {
				if c.Type == registry.ConditionBackendReachable {
					got = append(got, strings.TrimSpace(string(c.Status)+" "+c.Reason+" "+strings.TrimPrefix(c.Message, "this replica reads and writes the backend")))
				}
			}
			want := []string{}
			if tc.condition != "" {
				want = append(want, tc.condition)
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("conditions %q, want %q", got, want)
			}
			if tc.condition != "" && strings.HasPrefix(tc.condition, "False") &&
				!r.Status.Conditions[0].LastTransitionTime.Equal(&metav1.Time{Time: since}) {
				t.Errorf("transition time %v, want %v", r.Status.Conditions[0].LastTransitionTime, since)
			}
		})
	}
}
