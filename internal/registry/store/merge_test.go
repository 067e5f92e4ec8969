package store

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/registry"
)

func TestMergeStatus(t *testing.T) {
	cond := func(typ, status string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: "R", Message: typ + "=" + status}
	}
	for _, tc := range []struct {
		name      string
		stored    []metav1.Condition
		byCluster map[string][]metav1.Condition
		// want lists every condition's type=status in order; message is
		// the registry-wide Matched condition's message.
		want    []string
		matched string
	}{
		{
			name:    "no cluster",
			want:    []string{"Matched=False", "SecretData=False"},
			matched: "no member cluster caches resources for this registry",
		},
		{
			name: "clusters' conditions are prefixed and sorted",
			byCluster: map[string][]metav1.Condition{
				"b": {cond(registry.ClusterMatched, "True"), cond(registry.ClusterPublished, "False")},
				"a": {cond(registry.ClusterMatched, "True")},
				"c": {cond(registry.ClusterMatched, "False")},
			},
			want:    []string{"Matched=True", "SecretData=False", "a/Matched=True", "b/Matched=True", "b/Published=False", "c/Matched=False"},
			matched: "clusters: a, b",
		},
		{
			name:      "a per-cluster condition carried in the stored registry is replaced, not duplicated",
			stored:    []metav1.Condition{cond("a/Matched", "False"), cond("z/Matched", "True"), cond(registry.ConditionMatched, "False")},
			byCluster: map[string][]metav1.Condition{"a": {cond(registry.ClusterMatched, "True")}},
			want:      []string{"Matched=True", "SecretData=False", "a/Matched=True"},
			matched:   "clusters: a",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &registry.ResourceRegistry{}
			r.Status.Conditions = slices.Clone(tc.stored)
			mergeStatus(r, tc.byCluster)
			var got []string
			for _, c := range r.Status.Conditions {
				got = append(got, c.Type+"="+string(c.Status))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("conditions %q, want %q", got, tc.want)
			}
			if m := meta.FindStatusCondition(r.Status.Conditions, registry.ConditionMatched); m == nil || m.Message != tc.matched {
				t.Errorf("Matched condition %+v, want message %q", m, tc.matched)
			}
		})
	}
}

// BenchmarkMergeStatus reads a registry's status at 3 and 2,000 clusters of
// three conditions each, beside the per-condition meta.SetStatusCondition
// merge it replaced (the baseline, quadratic in the fleet).
// docs/benchmarks/fleet.md records the figures.
func BenchmarkMergeStatus(b *testing.B) {
	for _, n := range []int{3, 2000} {
		byCluster := map[string][]metav1.Condition{}
		for i := range n {
			byCluster[fmt.Sprintf("c%04d", i)] = []metav1.Condition{
				{Type: registry.ClusterAPIsServed, Status: metav1.ConditionTrue},
				{Type: registry.ClusterMatched, Status: metav1.ConditionTrue},
				{Type: registry.ClusterPublished, Status: metav1.ConditionTrue},
			}
		}
		b.Run(fmt.Sprintf("clusters=%d/append", n), func(b *testing.B) {
			for b.Loop() {
				mergeStatus(&registry.ResourceRegistry{}, byCluster)
			}
		})
		b.Run(fmt.Sprintf("clusters=%d/baseline-SetStatusCondition", n), func(b *testing.B) {
			for b.Loop() {
				r := &registry.ResourceRegistry{}
				for cluster, conds := range byCluster {
					for _, c := range conds {
						c.Type = registry.ClusterConditionType(cluster, c.Type)
						meta.SetStatusCondition(&r.Status.Conditions, c)
					}
				}
				registry.RefreshConditions(r)
			}
		})
	}
}
