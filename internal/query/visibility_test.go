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
	sorted := &Visibility{Grants: []Grant{{Clusters: []string{"m1", "m3", "m5"}, Namespaces: []string{"n1", "n2"}, Sorted: true}}}
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
		{"sorted lists, found by binary search", sorted, pods, "m3", "n2", true},
		{"sorted lists, a cluster between two", sorted, pods, "m2", "n2", false},
		{"sorted lists, a namespace past the last", sorted, pods, "m5", "n9", false},
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

// A Get names its resource and namespace: the clusters it may read are
// those of the grants that reach both, and a hidden copy reads as no copy.
func TestGetOptionsScope(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	clusterScoped := &Visibility{Grants: []Grant{{Clusters: []string{"member2", "member1"}}}}
	nsScoped := &Visibility{Grants: []Grant{{Namespaces: []string{"shop"}}}}
	mixed := &Visibility{Grants: []Grant{
		{Resources: []schema.GroupResource{pods.GroupResource()}, Clusters: []string{"c"}},
		{Resources: []schema.GroupResource{pods.GroupResource()}, Namespaces: []string{"shop"}, Clusters: []string{"a", "b"}},
		{Resources: []schema.GroupResource{deploys.GroupResource()}},
	}}
	cases := []struct {
		name string
		o    GetOptions
		want []string
		all  bool
	}{
		{"nil visibility reads every cluster", GetOptions{GVR: pods, Namespace: "x"}, nil, true},
		{"cluster-scoped: its clusters, sorted", GetOptions{GVR: pods, Namespace: "payments", Visible: clusterScoped}, []string{"member1", "member2"}, false},
		{"namespace-scoped in its namespace: every cluster", GetOptions{GVR: pods, Namespace: "shop", Visible: nsScoped}, nil, true},
		{"namespace-scoped elsewhere: none", GetOptions{GVR: pods, Namespace: "kube-system", Visible: nsScoped}, []string{}, false},
		{"namespace-scoped, cluster-scoped object: none", GetOptions{GVR: pods, Visible: nsScoped}, []string{}, false},
		{"rules add up per namespace", GetOptions{GVR: pods, Namespace: "shop", Visible: mixed}, []string{"a", "b", "c"}, false},
		{"a rule's namespace does not reach others", GetOptions{GVR: pods, Namespace: "payments", Visible: mixed}, []string{"c"}, false},
		{"another resource's rule", GetOptions{GVR: deploys, Namespace: "payments", Visible: mixed}, nil, true},
		{"qualified and visible", GetOptions{GVR: pods, Namespace: "x", Cluster: "member2", Visible: clusterScoped}, []string{"member2"}, false},
		{"qualified and hidden", GetOptions{GVR: pods, Namespace: "x", Cluster: "member3", Visible: clusterScoped}, []string{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, all := tc.o.Clusters()
			if all != tc.all || !slices.Equal(got, tc.want) || (!all && got == nil) {
				t.Fatalf("Clusters() = %#v %v, want %#v %v", got, all, tc.want, tc.all)
			}
			if tc.o.Cluster != "" {
				return
			}
			for _, c := range []string{"a", "b", "c", "member1", "member2", "member3"} {
				if sees := tc.o.Sees(c); sees != (all || slices.Contains(got, c)) {
					t.Fatalf("Sees(%q) = %v, Clusters() = %v %v", c, sees, got, all)
				}
			}
		})
	}
}
