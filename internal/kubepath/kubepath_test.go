package kubepath

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestParse: every path shape the Kubernetes API has, read into its typed
// request; an escaped separator, an escaped escape, '.', '..', an empty
// segment, a double or trailing slash, in every position (cluster, group,
// version, namespace, resource, name, subresource, proxy path) refused as
// malformed; discovery only in its own shapes.
func TestParse(t *testing.T) {
	pod := Request{Kind: KindResource, Prefix: "api", Version: "v1", Namespace: "a", Resource: "pods", Name: "web"}
	with := func(r Request, f func(*Request)) Request { f(&r); return r }
	for _, tc := range []struct {
		path string
		want Request
		err  error
	}{
		// Shapes.
		{"/version", Request{Kind: KindVersion}, nil},
		{"/api", Request{Kind: KindDiscovery, Prefix: "api"}, nil},
		{"/api/v1", Request{Kind: KindDiscovery, Prefix: "api", Version: "v1"}, nil},
		{"/apis", Request{Kind: KindDiscovery, Prefix: "apis"}, nil},
		{"/apis/apps", Request{Kind: KindDiscovery, Prefix: "apis", Group: "apps"}, nil},
		{"/apis/apps/v1", Request{Kind: KindDiscovery, Prefix: "apis", Group: "apps", Version: "v1"}, nil},
		{"/openapi/v2", Request{Kind: KindOpenAPI, OpenAPI: "v2"}, nil},
		{"/openapi/v3", Request{Kind: KindOpenAPI, OpenAPI: "v3"}, nil},
		{"/openapi/v3/api/v1", Request{Kind: KindOpenAPI, OpenAPI: "v3", Prefix: "api", Version: "v1"}, nil},
		{"/openapi/v3/apis/apps/v1", Request{Kind: KindOpenAPI, OpenAPI: "v3", Prefix: "apis", Group: "apps", Version: "v1"}, nil},
		{"/api/v1/pods", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "pods"}, nil},
		{"/api/v1/namespaces", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "namespaces"}, nil},
		{"/api/v1/namespaces/a", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "namespaces", Name: "a"}, nil},
		{"/api/v1/namespaces/a/status", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "namespaces", Name: "a", Subresource: "status"}, nil},
		{"/api/v1/namespaces/a/finalize", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "namespaces", Name: "a", Subresource: "finalize"}, nil},
		{"/api/v1/namespaces/a/pods", with(pod, func(r *Request) { r.Name = "" }), nil},
		{"/api/v1/namespaces/a/pods/web", pod, nil},
		{"/clusters/m1/api/v1/namespaces/a/pods/web", with(pod, func(r *Request) { r.Cluster = "m1" }), nil},
		{"/api/v1/namespaces/a/pods/web/log", with(pod, func(r *Request) { r.Subresource = "log" }), nil},
		{"/apis/apps/v1/namespaces/a/deployments/web/scale", Request{Kind: KindResource, Prefix: "apis", Group: "apps", Version: "v1", Namespace: "a", Resource: "deployments", Name: "web", Subresource: "scale"}, nil},
		{"/api/v1/nodes/n1/proxy", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "nodes", Name: "n1", Subresource: "proxy"}, nil},
		{"/api/v1/nodes/n1/proxy/run/a/web/app", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "nodes", Name: "n1", Subresource: "proxy", Rest: []string{"run", "a", "web", "app"}}, nil},
		{"/api/v1/namespaces/a/services/web:http/proxy/metrics", Request{Kind: KindResource, Prefix: "api", Version: "v1", Namespace: "a", Resource: "services", Name: "web:http", Subresource: "proxy", Rest: []string{"metrics"}}, nil},
		// Names may be anything a path segment carries, escaped or not.
		{"/api/v1/namespaces/a/pods/we%62", pod, nil},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node%20x", Request{Kind: KindResource, Prefix: "apis", Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles", Name: "system:node x"}, nil},
		// Discovery-shaped paths are discovery only in discovery's shapes.
		{"/api/secrets", Request{Kind: KindDiscovery, Prefix: "api", Version: "secrets"}, nil},
		{"/apis/x", Request{Kind: KindDiscovery, Prefix: "apis", Group: "x"}, nil},
		{"/api/v1/secrets", Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "secrets"}, nil},

		// Escaped separators and escapes, in every position.
		{"/clusters/m1%2Fapi/api/v1/pods", Request{}, ErrMalformed},
		{"/apis/apps%2Fv1/deployments", Request{}, ErrMalformed},
		{"/apis/apps/v1%2Fnamespaces%2Fb%2Fsecrets", Request{}, ErrMalformed},
		{"/api/v1%2Fnamespaces%2Fb%2Fsecrets", Request{}, ErrMalformed},
		{"/api/v1%252Fnamespaces%252Fb%252Fsecrets", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a%2F..%2Fb/secrets", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods%2F..%2Fsecrets/x", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%2F..%2F..%2Fsecrets", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%252F..%252F..%252Fb%252Fsecrets%252Fs", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%23/../../b/secrets", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%3F/x", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%253Fx", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web/log%2F..%2F..%2Fx", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web/log%23", Request{}, ErrMalformed},
		{"/api/v1/nodes/n1/proxy/run%2Fx", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/%2E%2E", Request{}, ErrMalformed},
		{"/api/v1/namespaces/%2E/pods/web", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/..", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%00", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/web%zz", Request{}, ErrMalformed},
		// Empty segments: double and trailing slashes, an empty name.
		{"/api/v1/namespaces//pods", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/pods/", Request{}, ErrMalformed},
		{"/api/v1//pods", Request{}, ErrMalformed},
		{"//api/v1/pods", Request{}, ErrMalformed},
		{"/api/", Request{}, ErrMalformed},
		{"/clusters//api/v1", Request{}, ErrMalformed},
		{"/version/", Request{}, ErrMalformed},
		// Not Kubernetes' shapes.
		{"/api/v1/namespaces/a/pods/web/log/x", Request{}, ErrMalformed},
		{"/api/v1/watch/namespaces/b/secrets", Request{}, ErrMalformed},
		{"/api/v1/proxy/nodes/n1", Request{}, ErrMalformed},
		{"/api/v1/namespaces/a/status/x", Request{}, ErrMalformed},
		{"/api/V1/pods", Request{}, ErrMalformed},
		{"/api/v1/Pods", Request{}, ErrMalformed},
		{"/apis/-x/v1", Request{}, ErrMalformed},
		{"/api/v1/namespaces/A/pods", Request{}, ErrMalformed},
		{"/openapi/v3/apis/apps", Request{}, ErrMalformed},
		{"/openapi/v4", Request{}, ErrMalformed},
		{"/version/x", Request{}, ErrMalformed},
		{"/healthz", Request{}, ErrNotAPI},
		{"/clusters/m1", Request{}, ErrNotAPI},
		{"/clusters/m1/metrics", Request{}, ErrNotAPI},
		{"api/v1", Request{}, ErrMalformed},
	} {
		got, err := Parse(tc.path)
		switch {
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("Parse(%q) = %+v, %v; want %v", tc.path, got, err, tc.err)
		case tc.err == nil && (err != nil || !got.Equal(tc.want)):
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
		case tc.err == nil:
			// What Parse reads, Path spells back so that it reads the
			// same, and Validate takes.
			back, err := Parse(got.Path())
			back.Cluster = got.Cluster
			if err != nil || !back.Equal(tc.want) {
				t.Errorf("Parse(%q).Path() = %q reads %+v, %v", tc.path, got.Path(), back, err)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Parse(%q).Validate(): %v", tc.path, err)
			}
		}
	}
}

// TestValidate: a typed request that did not come from Parse (the
// request channel's) is refused when a field carries what a segment may
// not, or when its path would read as another request.
func TestValidate(t *testing.T) {
	ok := Request{Cluster: "m1", Kind: KindResource, Prefix: "api", Version: "v1", Namespace: "a", Resource: "pods", Name: "web", Verb: "get"}
	with := func(f func(*Request)) Request { r := ok; f(&r); return r }
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Request{
		"slash in the name":            with(func(r *Request) { r.Name = "web/../../b/secrets/s" }),
		"percent in the name":          with(func(r *Request) { r.Name = "web%2F" }),
		"question mark in the name":    with(func(r *Request) { r.Name = "web?x" }),
		"hash in the namespace":        with(func(r *Request) { r.Namespace = "a#" }),
		"dot-dot name":                 with(func(r *Request) { r.Name = ".." }),
		"slash in the cluster":         with(func(r *Request) { r.Cluster = "m1/x" }),
		"slash in the group":           with(func(r *Request) { r.Prefix, r.Group = "apis", "apps/v1" }),
		"group under /api":             with(func(r *Request) { r.Group = "apps" }),
		"no group under /apis":         with(func(r *Request) { r.Prefix = "apis" }),
		"subresource without a name":   with(func(r *Request) { r.Name, r.Subresource = "", "log" }),
		"rest without proxy":           with(func(r *Request) { r.Subresource, r.Rest = "log", []string{"x"} }),
		"a Namespace's status":         with(func(r *Request) { r.Resource, r.Name = "status", "" }),
		"empty resource":               with(func(r *Request) { r.Resource = "" }),
		"unknown kind":                 with(func(r *Request) { r.Kind = "exec" }),
		"unknown verb":                 with(func(r *Request) { r.Verb = "escalate" }),
		"discovery with a resource":    with(func(r *Request) { r.Kind = KindDiscovery }),
		"version with a resource":      with(func(r *Request) { r.Kind = KindVersion }),
		"openapi without its version":  with(func(r *Request) { r.Kind = KindOpenAPI }),
		"empty proxy path segment":     with(func(r *Request) { r.Subresource, r.Rest = "proxy", []string{""} }),
		"newline in the name":          with(func(r *Request) { r.Name = "web\nx" }),
		"uppercase resource":           with(func(r *Request) { r.Resource = "Pods" }),
		"deprecated watch prefix":      with(func(r *Request) { r.Namespace, r.Resource = "", "watch" }),
		"namespace that is not a name": with(func(r *Request) { r.Namespace = "a b" }),
	} {
		if err := r.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v validates (%v)", name, r, err)
		}
	}
}

// TestURL: the member's URL is built from the fields, each segment
// escaped once, below the base's own (escaped) path, with the query as
// given and nothing else.
func TestURL(t *testing.T) {
	base, err := url.Parse("https://member.example:6443/pre%20fix/")
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Kind: KindResource, Prefix: "apis", Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles", Name: "system:a b;c,d"}
	u := r.URL(base, "fieldManager=kubectl")
	if got, want := u.String(), "https://member.example:6443/pre%20fix/apis/rbac.authorization.k8s.io/v1/clusterroles/system:a%20b%3Bc%2Cd?fieldManager=kubectl"; got != want {
		t.Fatalf("URL = %s, want %s", got, want)
	}
	if u.Path != "/pre fix/apis/rbac.authorization.k8s.io/v1/clusterroles/system:a b;c,d" {
		t.Fatalf("Path = %q", u.Path)
	}
}

// TestVerbOf: the verb as kube-apiserver's authorization names it.
func TestVerbOf(t *testing.T) {
	pods := Request{Kind: KindResource, Prefix: "api", Version: "v1", Resource: "pods"}
	pod := pods
	pod.Name = "web"
	for _, tc := range []struct {
		method, query string
		r             Request
		want          string
	}{
		{"GET", "", pods, "list"},
		{"GET", "watch=true", pods, "watch"},
		{"GET", "watch=1", pods, "watch"},
		{"GET", "watch=yes", pods, "watch"},
		{"GET", "watch=", pods, "watch"},
		{"GET", "watch=FALSE", pods, "list"},
		{"GET", "watch=0", pods, "list"},
		{"GET", "watch=true", pod, "get"},
		{"HEAD", "", pod, "get"},
		{"GET", "", Request{Kind: KindDiscovery, Prefix: "api"}, "get"},
		{"POST", "", pods, "create"},
		{"PUT", "", pod, "update"},
		{"PATCH", "", pod, "patch"},
		{"DELETE", "", pod, "delete"},
		{"DELETE", "", pods, "deletecollection"},
		{"OPTIONS", "", pod, ""},
		{"CONNECT", "", pod, ""},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := VerbOf(tc.method, q, tc.r); got != tc.want {
			t.Errorf("VerbOf(%s ?%s, %s) = %q, want %q", tc.method, tc.query, tc.r.Path(), got, tc.want)
		}
	}
}

// TestCheckQuery: a query is only a query.
func TestCheckQuery(t *testing.T) {
	for q, ok := range map[string]bool{
		"":                              true,
		"watch=true&resourceVersion=10": true,
		"labelSelector=a%3Db%2Cc":       true,
		"a=%23":                         true,
		"a=b#/../../secrets":            false,
		"a=b c":                         false,
		"a=b\n":                         false,
		"a=b;c=d":                       false,
		"a=%zz":                         false,
	} {
		if _, err := CheckQuery(q); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "query")) {
			t.Errorf("CheckQuery(%q): %v", q, err)
		}
	}
}
