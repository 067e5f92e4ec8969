package authz

import (
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Kubernetes API's view of the catalog is the Guard's judgment of the
// caller, as ListClusters' discovery view: all of it for a caller who may
// list clusters, the clusters where it may read a resource for another,
// a refusal for an unknown token.
func TestCatalogVisibility(t *testing.T) {
	g := testGuard(t)
	pods := schema.GroupResource{Resource: "pods"}
	deploys := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name, token string
		code        codes.Code
		all         bool
		visible     map[string]bool // "cluster/resource" -> visible
	}{
		{name: "admin sees it all", token: "admin-tok", all: true},
		{name: "alice reads pods of member1 only", token: "alice-tok",
			visible: map[string]bool{"member1/pods": true, "member2/pods": false, "member1/deployments": false}},
		{name: "bob reads pods of every cluster, in one namespace", token: "bob-tok",
			visible: map[string]bool{"member1/pods": true, "member2/pods": true, "member2/deployments": false}},
		{name: "ops reads no resource", token: "ops-tok", visible: map[string]bool{"member1/pods": false}},
		{name: "an unknown token is refused", token: "nope", code: codes.Unauthenticated},
		{name: "no token is refused", code: codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/v1", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			vis, err := g.CatalogVisibility(r)
			if status.Code(err) != tc.code {
				t.Fatalf("err %v, want %v", err, tc.code)
			}
			if err != nil {
				return
			}
			if (vis == nil) != tc.all {
				t.Fatalf("everything visible = %v, want %v", vis == nil, tc.all)
			}
			for key, want := range tc.visible {
				cluster, res, _ := strings.Cut(key, "/")
				gr := pods
				if res == "deployments" {
					gr = deploys
				}
				if got := vis(cluster, gr); got != want {
					t.Errorf("%s visible = %v, want %v", key, got, want)
				}
			}
		})
	}
}
