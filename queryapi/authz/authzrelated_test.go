package authz

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestFilterRelated: a node outside the visibility goes, with every edge
// naming it; a node of an unknown resource goes unless everything is
// visible.
func TestFilterRelated(t *testing.T) {
	answer := func() *fleetviewv1.RelatedResponse {
		return &fleetviewv1.RelatedResponse{
			Nodes: []*fleetviewv1.RelatedNode{
				{Id: "c1//Pod/shop/p", Cluster: "c1", Resource: "pods", Namespace: "shop"},
				{Id: "c1/apps/ReplicaSet/shop/rs", Cluster: "c1", Group: "apps", Resource: "replicasets", Namespace: "shop"},
				{Id: "c1//Secret/shop/db", Cluster: "c1", Resource: "secrets", Namespace: "shop"},
				{Id: "c2//Pod/shop/p", Cluster: "c2", Resource: "pods", Namespace: "shop"},
				{Id: "c1/x.io/Gadget/shop/g", Cluster: "c1", Group: "x.io", Kind: "Gadget", Namespace: "shop"},
			},
			Edges: []*fleetviewv1.RelatedEdge{
				{Type: "owner", From: "c1//Pod/shop/p", To: "c1/apps/ReplicaSet/shop/rs"},
				{Type: "references", From: "c1//Pod/shop/p", To: "c1//Secret/shop/db"},
				{Type: "copy", From: "c1//Pod/shop/p", To: "c2//Pod/shop/p"},
				{Type: "owner", From: "c1//Pod/shop/p", To: "c1/x.io/Gadget/shop/g"},
			},
		}
	}
	ids := func(r *fleetviewv1.RelatedResponse) (nodes, edges []string) {
		for _, n := range r.GetNodes() {
			nodes = append(nodes, n.GetId())
		}
		for _, e := range r.GetEdges() {
			edges = append(edges, e.GetType()+" "+e.GetTo())
		}
		return nodes, edges
	}
	for _, tc := range []struct {
		name              string
		vis               *query.Visibility
		wantNodes, wantEd []string
	}{
		{"everything", nil,
			[]string{"c1//Pod/shop/p", "c1/apps/ReplicaSet/shop/rs", "c1//Secret/shop/db", "c2//Pod/shop/p", "c1/x.io/Gadget/shop/g"},
			[]string{"owner c1/apps/ReplicaSet/shop/rs", "references c1//Secret/shop/db", "copy c2//Pod/shop/p", "owner c1/x.io/Gadget/shop/g"}},
		{"pods of c1", &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{{Resource: "pods"}}, Clusters: []string{"c1"}}}},
			[]string{"c1//Pod/shop/p"}, nil},
		{"all but secrets", &query.Visibility{Grants: []query.Grant{{Except: []schema.GroupResource{{Resource: "secrets"}}}}},
			[]string{"c1//Pod/shop/p", "c1/apps/ReplicaSet/shop/rs", "c2//Pod/shop/p"},
			[]string{"owner c1/apps/ReplicaSet/shop/rs", "copy c2//Pod/shop/p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := answer()
			FilterRelated(r, tc.vis)
			nodes, edges := ids(r)
			if !slices.Equal(nodes, tc.wantNodes) || !slices.Equal(edges, tc.wantEd) {
				t.Errorf("nodes %v edges %v, want %v %v", nodes, edges, tc.wantNodes, tc.wantEd)
			}
		})
	}
}
