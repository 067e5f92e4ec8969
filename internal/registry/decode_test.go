package registry

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// seedRegistry is what testdata/seed-registry.yaml must decode to.
func seedRegistry() *ResourceRegistry {
	return &ResourceRegistry{
		TypeMeta:   metav1.TypeMeta{APIVersion: KarmadaAPIVersion, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "clustercache-sample"},
		Spec: ResourceRegistrySpec{
			TargetCluster: ClusterAffinity{ClusterNames: []string{"member1", "member2", "member3"}},
			ResourceSelectors: []ResourceSelector{
				{APIVersion: "v1", Kind: "Pod"},
				{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
				{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: "kube-system"},
				{APIVersion: "apps/v1", Kind: "Deployment"},
			},
			BackendStore: &BackendStoreConfig{OpenSearch: &OpenSearchConfig{
				Addresses: []string{"https://localhost:9200"},
				SecretRef: SecretReference{Namespace: "default", Name: "opensearch-creds"},
			}},
		},
		Status: ResourceRegistryStatus{Conditions: []metav1.Condition{}},
	}
}

func TestDecodeValidExamples(t *testing.T) {
	noBackend := seedRegistry()
	noBackend.Spec.BackendStore = nil

	tests := []struct {
		file string
		want *ResourceRegistry // nil: only check that it decodes and validates
	}{
		{file: "seed-registry.yaml", want: seedRegistry()},
		{file: "seed-registry.json", want: seedRegistry()},
		{file: "seed-registry-no-backend.yaml", want: noBackend},
		{file: "fleetview-registry.yaml"},
		{file: "everything-registry.yaml", want: &ResourceRegistry{
			TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
			ObjectMeta: metav1.ObjectMeta{Name: "everything"},
			Spec: ResourceRegistrySpec{ResourceSelectors: []ResourceSelector{
				{APIVersion: "*", Kind: "*", Exclude: []KindRef{{Group: "flowcontrol.apiserver.k8s.io"}, {Kind: "ControllerRevision"}, {Group: "core", Kind: "ComponentStatus"}}},
				{APIVersion: "v1", Kind: "Event", Namespaces: []string{"payments", "checkout"}},
			}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Decode(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if errs := Validate(got); len(errs) != 0 {
				t.Fatalf("Validate: %v", errs)
			}
			if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode mismatch\n got: %+v\nwant: %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeFleetviewGroup(t *testing.T) {
	got, err := Decode(readTestdata(t, "fleetview-registry.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != APIVersion || got.Kind != Kind {
		t.Errorf("TypeMeta = %+v", got.TypeMeta)
	}
	if !got.Spec.IncludeSecretData {
		t.Error("includeSecretData not decoded")
	}
	tc := got.Spec.TargetCluster
	if tc.LabelSelector == nil || tc.LabelSelector.MatchLabels["env"] != "prod" || len(tc.LabelSelector.MatchExpressions) != 1 {
		t.Errorf("labelSelector = %+v", tc.LabelSelector)
	}
	if tc.FieldSelector == nil || len(tc.FieldSelector.MatchExpressions) != 3 {
		t.Errorf("fieldSelector = %+v", tc.FieldSelector)
	}
	if !reflect.DeepEqual(tc.Exclude, []string{"eu3"}) {
		t.Errorf("exclude = %v", tc.Exclude)
	}
	if got.Spec.BackendStore != nil {
		t.Errorf("backendStore = %+v, want nil", got.Spec.BackendStore)
	}
}

const validBody = `
metadata:
  name: r
spec:
  targetCluster: {}
  resourceSelectors:
  - {apiVersion: v1, kind: Pod}
`

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		wantIs       []error
		wantNotIs    []error
		wantContains []string
	}{
		{
			name:         "unknown top-level field",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nfoo: 1\n" + validBody,
			wantIs:       []error{ErrDecode, ErrUnknownField},
			wantContains: []string{`unknown field "foo"`},
		},
		{
			name: "unknown nested fields all named with their paths",
			in: `apiVersion: search.karmada.io/v1alpha1
kind: ResourceRegistry
metadata: {name: r, colour: blue}
spec:
  targetCluster: {clusterName: [a]}
  resourceSelectors:
  - {apiVersion: v1, kind: Pod, name: x}
`,
			wantIs: []error{ErrDecode, ErrUnknownField},
			wantContains: []string{
				`unknown field "metadata.colour"`,
				`unknown field "spec.targetCluster.clusterName"`,
				`unknown field "spec.resourceSelectors[0].name"`,
			},
		},
		{
			name:         "keys are case-sensitive",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + strings.Replace(validBody, "resourceSelectors", "ResourceSelectors", 1),
			wantIs:       []error{ErrUnknownField},
			wantContains: []string{`unknown field "spec.ResourceSelectors"`},
		},
		{
			name:         "unknown field in JSON",
			in:           `{"apiVersion":"fleetview.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"r"},"spec":{"targetCluster":{},"resourceSelectors":[],"backend":{}}}`,
			wantIs:       []error{ErrDecode, ErrUnknownField},
			wantContains: []string{`unknown field "spec.backend"`},
		},
		{
			name:         "typo reports the unknown field and the missing one together",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + strings.Replace(validBody, "targetCluster", "targetClusters", 1),
			wantIs:       []error{ErrDecode, ErrUnknownField},
			wantContains: []string{`unknown field "spec.targetClusters"`, `missing required field "spec.targetCluster"`},
		},
		{
			name:         "wrong apiVersion",
			in:           "apiVersion: apps/v1\nkind: ResourceRegistry\n" + validBody,
			wantIs:       []error{ErrUnsupportedType},
			wantNotIs:    []error{ErrDecode},
			wantContains: []string{`apiVersion "apps/v1" is not supported`},
		},
		{
			name:         "other version of the Karmada group",
			in:           "apiVersion: search.karmada.io/v1beta1\nkind: ResourceRegistry\n" + validBody,
			wantIs:       []error{ErrUnsupportedType},
			wantContains: []string{`"search.karmada.io/v1beta1"`},
		},
		{
			name:         "wrong kind",
			in:           "apiVersion: fleetview.io/v1alpha1\nkind: Deployment\n" + validBody,
			wantIs:       []error{ErrUnsupportedType},
			wantContains: []string{`kind "Deployment" is not supported`},
		},
		{
			name:         "missing apiVersion and kind both reported",
			in:           validBody,
			wantIs:       []error{ErrUnsupportedType},
			wantContains: []string{"apiVersion is required", "kind is required"},
		},
		{
			name:         "wrong value type names the field",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nspec:\n  targetCluster:\n    clusterNames: member1\n",
			wantIs:       []error{ErrDecode},
			wantNotIs:    []error{ErrUnknownField},
			wantContains: []string{"spec.targetCluster.clusterNames"},
		},
		{
			name:         "duplicate key",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nkind: ResourceRegistry\n" + validBody,
			wantIs:       []error{ErrDecode},
			wantContains: []string{`"kind" already set`},
		},
		{
			name:   "malformed YAML",
			in:     "apiVersion: [unterminated\n",
			wantIs: []error{ErrDecode},
		},
		{
			name:         "not an object",
			in:           "- a\n- b\n",
			wantIs:       []error{ErrDecode},
			wantNotIs:    []error{ErrUnsupportedType},
			wantContains: []string{"must be an object"},
		},
		{
			name:         "missing spec",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nmetadata: {name: r}\n",
			wantIs:       []error{ErrDecode},
			wantContains: []string{`missing required field "spec"`},
		},
		{
			name:         "missing targetCluster",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + strings.Replace(validBody, "  targetCluster: {}\n", "", 1),
			wantIs:       []error{ErrDecode},
			wantNotIs:    []error{ErrUnknownField},
			wantContains: []string{`missing required field "spec.targetCluster"`, "targetCluster: {}"},
		},
		{
			name:         "null targetCluster",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + strings.Replace(validBody, "targetCluster: {}", "targetCluster:", 1),
			wantIs:       []error{ErrDecode},
			wantContains: []string{`missing required field "spec.targetCluster"`},
		},
		{
			name:         "empty input",
			in:           "# only a comment\n",
			wantIs:       []error{ErrDecode},
			wantContains: []string{"no document"},
		},
		{
			name:         "several documents are not silently truncated",
			in:           "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + validBody + "---\napiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + validBody,
			wantIs:       []error{ErrDecode},
			wantContains: []string{"found 2 documents"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", got)
			}
			if got != nil {
				t.Errorf("Decode returned an object with its error: %+v", got)
			}
			for _, target := range tt.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("error %q is not %v", err, target)
				}
			}
			for _, target := range tt.wantNotIs {
				if errors.Is(err, target) {
					t.Errorf("error %q is unexpectedly %v", err, target)
				}
			}
			for _, s := range tt.wantContains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestDecodeAll(t *testing.T) {
	got, err := DecodeAll(readTestdata(t, "multi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Name)
	}
	if !reflect.DeepEqual(names, []string{"first", "second"}) {
		t.Errorf("names = %v", names)
	}

	// A single JSON document works too.
	got, err = DecodeAll(readTestdata(t, "seed-registry.json"))
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], seedRegistry()) {
		t.Errorf("DecodeAll(json) = %+v, %v", got, err)
	}

	got, err = DecodeAll(nil)
	if err != nil || len(got) != 0 {
		t.Errorf("DecodeAll(nil) = %+v, %v; want no registries, no error", got, err)
	}
}

func TestDecodeAllReportsEveryBadDocument(t *testing.T) {
	in := "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nbogus: true\n" + validBody +
		"---\napiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\n" + validBody +
		"---\napiVersion: v1\nkind: ConfigMap\n"
	got, err := DecodeAll([]byte(in))
	if err == nil {
		t.Fatal("DecodeAll succeeded")
	}
	if got != nil {
		t.Errorf("DecodeAll returned registries with its error: %v", got)
	}
	for _, target := range []error{ErrDecode, ErrUnknownField, ErrUnsupportedType} {
		if !errors.Is(err, target) {
			t.Errorf("error %q is not %v", err, target)
		}
	}
	for _, s := range []string{`document 1: `, `unknown field "bogus"`, `document 3: `, `kind "ConfigMap"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "document 2") {
		t.Errorf("error %q blames the valid document 2", err)
	}
}
