package memberrbac

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestDecide: a request under /clusters/<member>/ is that member's alone
// (issue #43): dave may list pods in shop in c1 only, and c2 allows him
// list everywhere; Decide answers for the named member, never the union,
// for every verb, namespaced and cluster-wide, with resourceNames granting
// the named object (get, and list or watch with a metadata.name field
// selector, which the request carries as its Name); a member the hub holds
// no RBAC of allows system:masters alone.
func TestDecide(t *testing.T) {
	ms := &Members{}
	for c, objs := range map[string][]any{
		"c1": {
			clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods"))),
			clusterRole("one-cm", rule(ss("get", "list", "watch"), ss(""), ss("configmaps"), "cfg")),
			rb("shop", "dave", "ClusterRole", "pod-reader", userSubject("dave")),
			rb("shop", "dave-cm", "ClusterRole", "one-cm", userSubject("dave")),
		},
		"c2": {
			clusterRole("pod-reader", rule(ss("get", "list", "watch"), ss(""), ss("pods"))),
			crb("dave", "pod-reader", userSubject("dave")),
		},
	} {
		for _, o := range objs {
			if err := ms.Upsert(c, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	dave := Identity{User: "dave"}
	pods := func(verb, ns, name string) Request {
		return Request{Verb: verb, Resource: "pods", Namespace: ns, Name: name}
	}
	cm := func(verb, ns, name string) Request {
		return Request{Verb: verb, Resource: "configmaps", Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		name    string
		cluster string
		caller  Identity
		req     Request
		want    bool
	}{
		{"list in the namespace c1 grants", "c1", dave, pods("list", "shop", ""), true},
		{"list in another namespace: c2 would, c1 does not", "c1", dave, pods("list", "payments", ""), false},
		{"list everywhere in c1: not cluster-wide", "c1", dave, pods("list", "", ""), false},
		{"watch everywhere in c2", "c2", dave, pods("watch", "", ""), true},
		{"watch in payments in c1", "c1", dave, pods("watch", "payments", ""), false},
		{"get in payments in c1", "c1", dave, pods("get", "payments", "web"), false},
		{"get in payments in c2", "c2", dave, pods("get", "payments", "web"), true},
		{"resourceNames: get the named object", "c1", dave, cm("get", "shop", "cfg"), true},
		{"resourceNames: list of the named object (field selector)", "c1", dave, cm("list", "shop", "cfg"), true},
		{"resourceNames: watch of the named object", "c1", dave, cm("watch", "shop", "cfg"), true},
		{"resourceNames: list of the collection", "c1", dave, cm("list", "shop", ""), false},
		{"resourceNames: another name", "c1", dave, cm("get", "shop", "other"), false},
		{"a member whose RBAC the hub lacks", "c3", dave, pods("list", "shop", ""), false},
		{"system:masters where the hub lacks RBAC", "c3", Identity{User: "root", Groups: ss("system:masters")}, pods("list", "", ""), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ms.Decide(context.Background(), tc.cluster, tc.caller, tc.req)
			if d.Allowed != tc.want {
				t.Fatalf("Decide = %+v, want allowed %v", d, tc.want)
			}
			if a, ok := ms.Lookup(tc.cluster); ok {
				if direct, _ := a.Authorize(context.Background(), Authenticated(tc.caller), tc.req); direct != d.Allowed {
					t.Fatalf("Decide %v, the member's Authorize %v", d.Allowed, direct)
				}
			}
			if !slices.Contains(d.Identity.Groups, "system:authenticated") {
				t.Fatalf("the member's identity %+v lacks system:authenticated", d.Identity)
			}
		})
	}
	if d := ms.Decide(context.Background(), "c3", dave, pods("list", "shop", "")); !strings.Contains(d.Reason, "no RBAC objects of cluster c3") {
		t.Fatalf("reason %q does not say the hub lacks c3's RBAC", d.Reason)
	}
}

// TestForbiddenMessage: kube-apiserver's words for a denied request
// (responsewriters.Forbidden over apierrors.NewForbidden).
func TestForbiddenMessage(t *testing.T) {
	for _, tc := range []struct {
		req    Request
		reason string
		want   string
	}{
		{Request{Verb: "list", Resource: "pods", Namespace: "y"}, "",
			`pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "y"`},
		{Request{Verb: "watch", APIGroup: "apps", Resource: "deployments"}, "",
			`deployments.apps is forbidden: User "x" cannot watch resource "deployments" in API group "apps" at the cluster scope`},
		{Request{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "y", Name: "web"}, `RBAC: role.rbac.authorization.k8s.io "r" not found`,
			`pods "web" is forbidden: User "x" cannot get resource "pods/log" in API group "" in the namespace "y": RBAC: role.rbac.authorization.k8s.io "r" not found`},
	} {
		if got := ForbiddenMessage("x", tc.req, tc.reason); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
