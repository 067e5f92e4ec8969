package query

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestVisibility(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	secrets := schema.GroupResource{Resource: "secrets"}
	deploys := schema.GroupResource{Group: "apps", Resource: "deployments"}
	starButSecrets := &Visibility{Grants: []Grant{{Except: []schema.GroupResource{secrets}, Namespaces: []string{"shop"}}}}
	twoRules := &Visibility{Grants: []Grant{
		{Resources: []schema.GroupResource{pods}, Clusters: []string{"a"}},
		{Resources: []schema.GroupResource{deploys}, Namespaces: []string{"x"}},
	}}
	cases := []struct {
		name        string
		v           *Visibility
		gr          schema.GroupResource
		cluster, ns string
		want        bool
	}{
		{"nil sees all", nil, secrets, "a", "x", true},
		{"no grants sees nothing", &Visibility{}, pods, "a", "x", false},
		{"star in namespace", starButSecrets, deploys, "b", "shop", true},
		{"star other namespace", starButSecrets, deploys, "b", "other", false},
		{"star never secrets", starButSecrets, secrets, "b", "shop", false},
		{"namespaced grant misses cluster-scoped", starButSecrets, schema.GroupResource{Resource: "nodes"}, "b", "", false},
		{"rule 1", twoRules, pods, "a", "anything", true},
		{"rule 1 other cluster", twoRules, pods, "b", "x", false}, // rule 2's namespace does not reach pods
		{"rule 2", twoRules, deploys, "b", "x", true},
		{"rule 2 other namespace", twoRules, deploys, "a", "y", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Allows(tc.gr, tc.cluster, tc.ns); got != tc.want {
				t.Fatalf("Allows(%v, %q, %q) = %v, want %v", tc.gr, tc.cluster, tc.ns, got, tc.want)
			}
		})
	}

	clusterCases := []struct {
		name string
		v    *Visibility
		want []string
		all  bool
	}{
		{"nil", nil, nil, true},
		{"one unrestricted grant", twoRules, nil, true},
		{"union, sorted", &Visibility{Grants: []Grant{{Clusters: []string{"c", "a"}}, {Clusters: []string{"b", "a"}}}}, []string{"a", "b", "c"}, false},
	}
	for _, tc := range clusterCases {
		t.Run("clusters "+tc.name, func(t *testing.T) {
			got, all := tc.v.Clusters()
			if all != tc.all || !slices.Equal(got, tc.want) {
				t.Fatalf("Clusters() = %v %v, want %v %v", got, all, tc.want, tc.all)
			}
		})
	}

	// String binds tokens: order-independent, different for different scopes.
	a := &Visibility{Grants: []Grant{{Clusters: []string{"x", "y"}}, {Resources: []schema.GroupResource{pods, deploys}}}}
	b := &Visibility{Grants: []Grant{{Resources: []schema.GroupResource{deploys, pods}}, {Clusters: []string{"y", "x"}}}}
	if a.String() != b.String() {
		t.Errorf("same visibility, different strings: %q %q", a.String(), b.String())
	}
	if a.String() == twoRules.String() || (*Visibility)(nil).String() != "" || (&Visibility{}).String() == "" {
		t.Errorf("strings do not tell visibilities apart")
	}
}
