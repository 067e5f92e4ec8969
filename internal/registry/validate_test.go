package registry

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validRegistry uses every optional part, so each invalid case below breaks
// exactly the rule it names.
func validRegistry() *ResourceRegistry {
	return &ResourceRegistry{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "valid.registry"},
		Spec: ResourceRegistrySpec{
			TargetCluster: ClusterAffinity{
				LabelSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"env": "prod"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpExists},
					},
				},
				FieldSelector: &FieldSelector{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: FieldProvider, Operator: corev1.NodeSelectorOpIn, Values: []string{"aws"}},
					{Key: FieldRegion, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"us-east-1"}},
				}},
				ClusterNames: []string{"member1", "member2"},
				Exclude:      []string{"member3"},
			},
			ResourceSelectors: []ResourceSelector{
				{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default"},
				{APIVersion: "v1", Kind: "Pod"},
			},
			BackendStore: &BackendStoreConfig{OpenSearch: &OpenSearchConfig{
				Addresses: []string{"https://os-0.example.com:9200", "http://10.0.0.1:9200/prefix"},
				SecretRef: SecretReference{Namespace: "fleetview", Name: "opensearch-creds"},
			}},
		},
	}
}

func fieldPaths(errs field.ErrorList) []string {
	var paths []string
	for _, e := range errs {
		paths = append(paths, e.Field)
	}
	return paths
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *ResourceRegistry)
	}{
		{"all optional parts set", func(*ResourceRegistry) {}},
		{"no TypeMeta (built in code)", func(r *ResourceRegistry) { r.TypeMeta = metav1.TypeMeta{} }},
		{"Karmada group", func(r *ResourceRegistry) { r.APIVersion = KarmadaAPIVersion }},
		{"empty affinity selects all clusters", func(r *ResourceRegistry) { r.Spec.TargetCluster = ClusterAffinity{} }},
		{"empty field selector", func(r *ResourceRegistry) { r.Spec.TargetCluster.FieldSelector = &FieldSelector{} }},
		{"zone key", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0].Key = FieldZone
		}},
		{"no backend store", func(r *ResourceRegistry) { r.Spec.BackendStore = nil }},
		{"backend store without openSearch", func(r *ResourceRegistry) { r.Spec.BackendStore = &BackendStoreConfig{} }},
		{"no secretRef", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.SecretRef = SecretReference{} }},
		{"kind with digits and dashes", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Kind = "HorizontalPodAutoscaler-v2" }},
		{"CRD group", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].APIVersion = "search.karmada.io/v1alpha1" }},
		{"secret data opt-in", func(r *ResourceRegistry) { r.Spec.IncludeSecretData = true }},
		{"every kind of every group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "*", Kind: "*"}
		}},
		{"every kind of a group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "apps/*", Kind: "*"}
		}},
		{"every kind of the core group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "core/*", Kind: "*"}
		}},
		{"every kind of one version", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "apps/v1", Kind: "*"}
		}},
		{"one kind in every group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "*", Kind: "Ingress"}
		}},
		{"custom resources with excludes and namespaces", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "*", Kind: "*", CustomResources: true, Namespaces: []string{"a", "b"},
				Exclude: []KindRef{{Group: "example.com"}, {Kind: "Widget"}, {Group: "core", Kind: "Event"}}}
		}},
		{"custom resources of a CRD group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "example.com/*", Kind: "*", CustomResources: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRegistry()
			tt.mutate(r)
			if errs := Validate(r); len(errs) != 0 {
				t.Errorf("Validate = %v, want no errors", errs)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	const (
		fs  = "spec.targetCluster.fieldSelector.matchExpressions"
		ls  = "spec.targetCluster.labelSelector"
		os  = "spec.backendStore.openSearch"
		sel = "spec.resourceSelectors"
	)
	tests := []struct {
		name      string
		mutate    func(r *ResourceRegistry)
		wantPaths []string
		wantType  field.ErrorType // checked on the first error when set
	}{
		// metadata and type
		{"name missing", func(r *ResourceRegistry) { r.Name = "" }, []string{"metadata.name"}, field.ErrorTypeRequired},
		{"name not a DNS subdomain", func(r *ResourceRegistry) { r.Name = "Bad_Name" }, []string{"metadata.name"}, field.ErrorTypeInvalid},
		{"namespace on a cluster-scoped object", func(r *ResourceRegistry) { r.Namespace = "default" }, []string{"metadata.namespace"}, field.ErrorTypeForbidden},
		{"unsupported apiVersion", func(r *ResourceRegistry) { r.APIVersion = "search.karmada.io/v1" }, []string{"apiVersion"}, field.ErrorTypeNotSupported},
		{"unsupported kind", func(r *ResourceRegistry) { r.Kind = "Cluster" }, []string{"kind"}, field.ErrorTypeNotSupported},

		// targetCluster.fieldSelector
		{"field key not provider/region/zone", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[1].Key = "cloud"
		}, []string{fs + "[1].key"}, field.ErrorTypeNotSupported},
		{"field operator Exists", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0].Operator = corev1.NodeSelectorOpExists
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0].Values = nil
		}, []string{fs + "[0].operator"}, field.ErrorTypeNotSupported},
		{"field operator Gt", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0].Operator = corev1.NodeSelectorOpGt
		}, []string{fs + "[0].operator"}, field.ErrorTypeNotSupported},
		{"field In without values", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0].Values = nil
		}, []string{fs + "[0].values"}, field.ErrorTypeRequired},
		{"field NotIn without values", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[1].Values = []string{}
		}, []string{fs + "[1].values"}, field.ErrorTypeRequired},

		// targetCluster.labelSelector
		{"label key invalid", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.LabelSelector.MatchLabels = map[string]string{"bad key": "x"}
		}, []string{ls + ".matchLabels"}, field.ErrorTypeInvalid},
		{"label value invalid", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.LabelSelector.MatchLabels = map[string]string{"env": "not valid!"}
		}, []string{ls + ".matchLabels"}, field.ErrorTypeInvalid},
		{"label operator unknown", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.LabelSelector.MatchExpressions[0].Operator = "Like"
		}, []string{ls + ".matchExpressions[0].operator"}, field.ErrorTypeInvalid},
		{"label In without values", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.LabelSelector.MatchExpressions[0].Operator = metav1.LabelSelectorOpIn
		}, []string{ls + ".matchExpressions[0].values"}, field.ErrorTypeRequired},
		{"label Exists with values", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.LabelSelector.MatchExpressions[0].Values = []string{"x"}
		}, []string{ls + ".matchExpressions[0].values"}, field.ErrorTypeForbidden},

		// targetCluster.clusterNames / exclude
		{"empty cluster name", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.ClusterNames[1] = ""
		}, []string{"spec.targetCluster.clusterNames[1]"}, field.ErrorTypeRequired},
		{"invalid cluster name", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.ClusterNames[0] = "Member_1"
		}, []string{"spec.targetCluster.clusterNames[0]"}, field.ErrorTypeInvalid},
		{"empty excluded name", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.Exclude = []string{"ok", ""}
		}, []string{"spec.targetCluster.exclude[1]"}, field.ErrorTypeRequired},
		{"invalid excluded name", func(r *ResourceRegistry) {
			r.Spec.TargetCluster.Exclude[0] = "member.3"
		}, []string{"spec.targetCluster.exclude[0]"}, field.ErrorTypeInvalid},

		// resourceSelectors
		{"no resource selectors", func(r *ResourceRegistry) { r.Spec.ResourceSelectors = nil }, []string{sel}, field.ErrorTypeRequired},
		{"apiVersion missing", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[1].APIVersion = "" }, []string{sel + "[1].apiVersion"}, field.ErrorTypeRequired},
		{"apiVersion with two slashes", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].APIVersion = "apps/v1/x" }, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"apiVersion without version", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].APIVersion = "apps/" }, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"apiVersion without group", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].APIVersion = "/v1" }, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"apiVersion group not a DNS subdomain", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].APIVersion = "Apps/v1" }, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"apiVersion version malformed", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[1].APIVersion = "V1" }, []string{sel + "[1].apiVersion"}, field.ErrorTypeInvalid},
		{"kind missing", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Kind = "" }, []string{sel + "[0].kind"}, field.ErrorTypeRequired},
		{"kind malformed", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Kind = "apps/Deployment" }, []string{sel + "[0].kind"}, field.ErrorTypeInvalid},
		{"namespace not a DNS label", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Namespace = "kube_system" }, []string{sel + "[0].namespace"}, field.ErrorTypeInvalid},
		{"namespace with dots", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Namespace = "a.b" }, []string{sel + "[0].namespace"}, field.ErrorTypeInvalid},
		{"namespaces entry empty", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Namespaces = []string{"ok", ""} }, []string{sel + "[0].namespaces[1]"}, field.ErrorTypeRequired},
		{"namespaces entry invalid", func(r *ResourceRegistry) { r.Spec.ResourceSelectors[0].Namespaces = []string{"a.b"} }, []string{sel + "[0].namespaces[0]"}, field.ErrorTypeInvalid},
		{"wildcard group not a DNS subdomain", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "Apps/*", Kind: "*"}
		}, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"wildcard version only", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "apps/v*", Kind: "*"}
		}, []string{sel + "[0].apiVersion"}, field.ErrorTypeInvalid},
		{"wildcard with an OpenSearch backend", func(r *ResourceRegistry) {
			r.Spec.ResourceSelectors[1] = ResourceSelector{APIVersion: "*", Kind: "*"}
		}, []string{sel + "[1]"}, field.ErrorTypeForbidden},
		{"exclude on an exact selector", func(r *ResourceRegistry) {
			r.Spec.ResourceSelectors[0].Exclude = []KindRef{{Kind: "Event"}}
		}, []string{sel + "[0].exclude"}, field.ErrorTypeInvalid},
		{"customResources on an exact selector", func(r *ResourceRegistry) {
			r.Spec.ResourceSelectors[0].CustomResources = true
		}, []string{sel + "[0].customResources"}, field.ErrorTypeInvalid},
		{"customResources of a built-in group", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "apps/*", Kind: "*", CustomResources: true}
		}, []string{sel + "[0].customResources"}, field.ErrorTypeInvalid},
		{"exclude entry empty", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{}}}
		}, []string{sel + "[0].exclude[0]"}, field.ErrorTypeRequired},
		{"exclude group and kind malformed", func(r *ResourceRegistry) {
			r.Spec.BackendStore = nil
			r.Spec.ResourceSelectors[0] = ResourceSelector{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "Bad_Group", Kind: "apps/Deployment"}}}
		}, []string{sel + "[0].exclude[0].group", sel + "[0].exclude[0].kind"}, field.ErrorTypeInvalid},

		// backendStore.openSearch
		{"no addresses", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses = nil }, []string{os + ".addresses"}, field.ErrorTypeRequired},
		{"address scheme ftp", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses[1] = "ftp://os:9200" }, []string{os + ".addresses[1]"}, field.ErrorTypeInvalid},
		{"address without scheme", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses[1] = "localhost:9200" }, []string{os + ".addresses[1]"}, field.ErrorTypeInvalid},
		{"address without host", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses[0] = "https://" }, []string{os + ".addresses[0]"}, field.ErrorTypeInvalid},
		{"address with port only", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses[0] = "https://:9200" }, []string{os + ".addresses[0]"}, field.ErrorTypeInvalid},
		{"address unparsable", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.Addresses[0] = "http://[::1" }, []string{os + ".addresses[0]"}, field.ErrorTypeInvalid},
		{"address with credentials", func(r *ResourceRegistry) {
			r.Spec.BackendStore.OpenSearch.Addresses[0] = "https://admin:hunter2@os:9200"
		}, []string{os + ".addresses[0]"}, field.ErrorTypeInvalid},
		{"secretRef without namespace", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.SecretRef.Namespace = "" }, []string{os + ".secretRef.namespace"}, field.ErrorTypeRequired},
		{"secretRef without name", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.SecretRef.Name = "" }, []string{os + ".secretRef.name"}, field.ErrorTypeRequired},
		{"secretRef name invalid", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.SecretRef.Name = "Creds" }, []string{os + ".secretRef.name"}, field.ErrorTypeInvalid},
		{"secretRef namespace invalid", func(r *ResourceRegistry) { r.Spec.BackendStore.OpenSearch.SecretRef.Namespace = "a.b" }, []string{os + ".secretRef.namespace"}, field.ErrorTypeInvalid},

		// all at once
		{"every violation reported together", func(r *ResourceRegistry) {
			r.Name = ""
			r.Spec.TargetCluster.FieldSelector.MatchExpressions[0] = corev1.NodeSelectorRequirement{Key: "cloud", Operator: corev1.NodeSelectorOpExists}
			r.Spec.TargetCluster.ClusterNames = []string{""}
			r.Spec.ResourceSelectors = []ResourceSelector{
				{APIVersion: "a/b/c", Kind: "Pod"},
				{APIVersion: "v1", Kind: "", Namespace: "Bad"},
			}
			r.Spec.BackendStore.OpenSearch.Addresses = []string{"https://ok:9200", "ftp://x"}
		}, []string{
			"metadata.name",
			fs + "[0].key",
			fs + "[0].operator",
			"spec.targetCluster.clusterNames[0]",
			sel + "[0].apiVersion",
			sel + "[1].kind",
			sel + "[1].namespace",
			os + ".addresses[1]",
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRegistry()
			tt.mutate(r)
			errs := Validate(r)
			if got := fieldPaths(errs); !reflect.DeepEqual(got, tt.wantPaths) {
				t.Fatalf("paths = %q, want %q\nerrors: %v", got, tt.wantPaths, errs)
			}
			if tt.wantType != "" && errs[0].Type != tt.wantType {
				t.Errorf("type = %s, want %s (%v)", errs[0].Type, tt.wantType, errs[0])
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	got := fieldPaths(Validate(nil))
	want := []string{"metadata.name", "spec.resourceSelectors"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Validate(nil) paths = %q, want %q", got, want)
	}
}

func TestValidateDoesNotLeakAddressCredentials(t *testing.T) {
	r := validRegistry()
	r.Spec.BackendStore.OpenSearch.Addresses = []string{"https://admin:hunter2@os:9200", "http://admin:hunter2@[::1"}
	errs := Validate(r)
	if len(errs) != 2 {
		t.Fatalf("Validate = %v, want 2 errors", errs)
	}
	if msg := ToError(errs).Error(); strings.Contains(msg, "hunter2") {
		t.Errorf("error message leaks the password: %s", msg)
	}
}

func TestValidateClusterAffinityNil(t *testing.T) {
	if errs := ValidateClusterAffinity(nil, field.NewPath("x")); errs != nil {
		t.Errorf("ValidateClusterAffinity(nil) = %v", errs)
	}
}

func TestToError(t *testing.T) {
	if err := ToError(nil); err != nil {
		t.Errorf("ToError(nil) = %v, want nil", err)
	}

	r := validRegistry()
	r.Name = ""
	r.Spec.ResourceSelectors[0].Namespace = "Bad"
	err := ToError(Validate(r))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v is not ErrInvalid", err)
	}
	var invalid *InvalidError
	if !errors.As(err, &invalid) || len(invalid.Errs) != 2 {
		t.Fatalf("errors.As(*InvalidError) failed or lost violations: %v", err)
	}
	for _, s := range []string{"metadata.name", "spec.resourceSelectors[0].namespace"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not name %s", err, s)
		}
	}
}
