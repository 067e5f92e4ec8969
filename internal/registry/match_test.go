package registry

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func fieldReq(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func fields(reqs ...corev1.NodeSelectorRequirement) *FieldSelector {
	return &FieldSelector{MatchExpressions: reqs}
}

func TestClusterAffinityMatches(t *testing.T) {
	awsEU := ClusterInfo{
		Name:     "member1",
		Labels:   map[string]string{"env": "prod", "tier": "gold"},
		Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a",
	}
	bare := ClusterInfo{Name: "member2"} // no labels, no provider/region/zone

	tests := []struct {
		name     string
		affinity *ClusterAffinity
		cluster  ClusterInfo
		want     bool
	}{
		{"nil affinity matches all", nil, awsEU, true},
		{"empty affinity matches all", &ClusterAffinity{}, bare, true},

		{"clusterNames contains", &ClusterAffinity{ClusterNames: []string{"member0", "member1"}}, awsEU, true},
		{"clusterNames lacks", &ClusterAffinity{ClusterNames: []string{"member0"}}, awsEU, false},

		{"exclude names it", &ClusterAffinity{Exclude: []string{"member1"}}, awsEU, false},
		{"exclude names another", &ClusterAffinity{Exclude: []string{"member9"}}, awsEU, true},
		{"exclude wins over clusterNames", &ClusterAffinity{ClusterNames: []string{"member1"}, Exclude: []string{"member1"}}, awsEU, false},

		{"matchLabels match", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, awsEU, true},
		{"matchLabels mismatch", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}, awsEU, false},
		{"matchLabels on unlabelled cluster", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, bare, false},
		{"empty labelSelector matches all", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{}}, bare, true},
		{"matchExpressions In", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"gold", "silver"}},
		}}}, awsEU, true},
		{"matchExpressions NotIn", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"gold"}},
		}}}, awsEU, false},
		{"matchExpressions Exists", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpExists},
		}}}, bare, false},
		{"matchExpressions DoesNotExist", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}}, bare, true},
		{"matchLabels and matchExpressions both needed", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{
			MatchLabels:      map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"silver"}}},
		}}, awsEU, false},
		{"malformed labelSelector matches nothing", &ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: "Like", Values: []string{"gold"}},
		}}}, awsEU, false},

		{"provider In", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpIn, "gcp", "aws"))}, awsEU, true},
		{"provider In mismatch", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpIn, "gcp"))}, awsEU, false},
		{"provider NotIn", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpNotIn, "aws"))}, awsEU, false},
		{"provider NotIn other", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpNotIn, "gcp"))}, awsEU, true},
		{"region In", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldRegion, corev1.NodeSelectorOpIn, "eu-west-1"))}, awsEU, true},
		{"region NotIn", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldRegion, corev1.NodeSelectorOpNotIn, "eu-west-1"))}, awsEU, false},
		{"zone In", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldZone, corev1.NodeSelectorOpIn, "eu-west-1a", "eu-west-1b"))}, awsEU, true},
		{"zone NotIn", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldZone, corev1.NodeSelectorOpNotIn, "eu-west-1a"))}, awsEU, false},
		{"In on unset field never matches", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldRegion, corev1.NodeSelectorOpIn, "eu-west-1"))}, bare, false},
		{"NotIn on unset field always matches", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldZone, corev1.NodeSelectorOpNotIn, "eu-west-1a"))}, bare, true},
		{"field expressions are ANDed", &ClusterAffinity{FieldSelector: fields(
			fieldReq(FieldProvider, corev1.NodeSelectorOpIn, "aws"),
			fieldReq(FieldRegion, corev1.NodeSelectorOpIn, "us-east-1"),
		)}, awsEU, false},
		{"unsupported field key matches nothing", &ClusterAffinity{FieldSelector: fields(fieldReq("cloud", corev1.NodeSelectorOpNotIn, "x"))}, awsEU, false},
		{"unsupported field operator matches nothing", &ClusterAffinity{FieldSelector: fields(fieldReq(FieldZone, corev1.NodeSelectorOpExists))}, awsEU, false},

		{"all conditions hold", &ClusterAffinity{
			ClusterNames:  []string{"member1", "member2"},
			Exclude:       []string{"member2"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpIn, "aws"), fieldReq(FieldZone, corev1.NodeSelectorOpNotIn, "eu-west-1b")),
		}, awsEU, true},
		{"names hold, labels fail", &ClusterAffinity{
			ClusterNames:  []string{"member1"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}},
		}, awsEU, false},
		{"labels hold, names fail", &ClusterAffinity{
			ClusterNames:  []string{"member2"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		}, awsEU, false},
		{"names and labels hold, fields fail", &ClusterAffinity{
			ClusterNames:  []string{"member1"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			FieldSelector: fields(fieldReq(FieldRegion, corev1.NodeSelectorOpNotIn, "eu-west-1")),
		}, awsEU, false},
		{"labels and fields hold, excluded", &ClusterAffinity{
			Exclude:       []string{"member1"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			FieldSelector: fields(fieldReq(FieldProvider, corev1.NodeSelectorOpIn, "aws")),
		}, awsEU, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.affinity.Matches(tt.cluster); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFleetviewExampleMatching(t *testing.T) {
	r, err := Decode(readTestdata(t, "fleetview-registry.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prod := map[string]string{"env": "prod"}
	tests := []struct {
		cluster ClusterInfo
		want    bool
	}{
		{ClusterInfo{Name: "eu1", Labels: prod, Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a"}, true},
		{ClusterInfo{Name: "eu2", Labels: prod, Provider: "gcp", Region: "europe-west1", Zone: "europe-west1-b"}, true},
		{ClusterInfo{Name: "eu3", Labels: prod, Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a"}, false},                                               // excluded
		{ClusterInfo{Name: "eu1", Labels: map[string]string{"env": "prod", "tier": "canary"}, Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a"}, false}, // tier NotIn
		{ClusterInfo{Name: "eu1", Labels: prod, Provider: "azure", Region: "eu-west-1", Zone: "eu-west-1a"}, false},                                             // provider
		{ClusterInfo{Name: "eu1", Labels: prod, Provider: "aws", Region: "us-east-1", Zone: "eu-west-1a"}, false},                                               // region NotIn
		{ClusterInfo{Name: "eu1", Labels: prod, Provider: "aws", Region: "eu-west-1"}, false},                                                                   // zone unset, In
		{ClusterInfo{Name: "us1", Labels: prod, Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a"}, false},                                               // not in clusterNames
	}
	for _, tt := range tests {
		if got := r.Spec.TargetCluster.Matches(tt.cluster); got != tt.want {
			t.Errorf("Matches(%+v) = %v, want %v", tt.cluster, got, tt.want)
		}
	}
}

func TestSelectorsFor(t *testing.T) {
	r, err := Decode(readTestdata(t, "seed-registry.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	got := r.SelectorsFor(ClusterInfo{Name: "member2"})
	if !reflect.DeepEqual(got, r.Spec.ResourceSelectors) {
		t.Fatalf("SelectorsFor(member2) = %v, want %v", got, r.Spec.ResourceSelectors)
	}
	got[0].Kind = "Mutated"
	if r.Spec.ResourceSelectors[0].Kind != "Pod" {
		t.Error("SelectorsFor returned the registry's own slice")
	}

	if got := r.SelectorsFor(ClusterInfo{Name: "member4"}); got != nil {
		t.Errorf("SelectorsFor(member4) = %v, want nil", got)
	}
	var nilRegistry *ResourceRegistry
	if got := nilRegistry.SelectorsFor(ClusterInfo{Name: "member1"}); got != nil {
		t.Errorf("nil registry SelectorsFor = %v, want nil", got)
	}
}

func TestResourceSelectorGroupVersionKind(t *testing.T) {
	tests := []struct {
		sel  ResourceSelector
		want schema.GroupVersionKind
	}{
		{ResourceSelector{APIVersion: "v1", Kind: "Pod"}, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{ResourceSelector{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: "kube-system"}, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}},
		{ResourceSelector{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}, schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}},
		{ResourceSelector{APIVersion: "a/b/c", Kind: "X"}, schema.GroupVersionKind{Kind: "X"}},
	}
	for _, tt := range tests {
		if got := tt.sel.GroupVersionKind(); got != tt.want {
			t.Errorf("%+v.GroupVersionKind() = %v, want %v", tt.sel, got, tt.want)
		}
	}
}
