package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

var (
	relPods   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	relDeploy = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	relRS     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	relSvc    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	relCM     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// relEvent is an upsert of one object; meta and body are the JSON after
// metadata's uid and after metadata.
func relEvent(cluster string, gvr schema.GroupVersionResource, kind, ns, name, meta, body string) *fleetviewv1.ResourceEvent {
	uid := cluster + "-" + kind + "-" + ns + "-" + name
	api := gvr.Version
	if gvr.Group != "" {
		api = gvr.Group + "/" + gvr.Version
	}
	obj := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q,"uid":%q%s}%s}`, api, kind, name, ns, uid, meta, body)
	return &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(gvr), Kind: kind, Uid: uid, Namespace: ns, Name: name,
		ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(obj), Namespaced: true}
}

func ownerRef(kind, name string) string {
	return fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"apps/v1","kind":%q,"name":%q,"uid":"x"}]`, kind, name)
}

// relFleet is each cluster's objects: in shop, Deployment web ->
// ReplicaSet web-1 -> Pods (phases and images varying, mounting ConfigMap
// cfg and Secret db, not cached) with Service web selecting them, and a
// Pod of app api; in ops, a Pod without owner. c2 holds fewer Pods.
func relFleet(cluster string, pods int) []*fleetviewv1.ResourceEvent {
	sel := `,"spec":{"selector":{"matchLabels":{"app":"web"}}}`
	evs := []*fleetviewv1.ResourceEvent{
		relEvent(cluster, relDeploy, "Deployment", "shop", "web", `,"labels":{"app":"web"}`, sel),
		relEvent(cluster, relRS, "ReplicaSet", "shop", "web-1", `,"labels":{"app":"web"}`+ownerRef("Deployment", "web"), sel),
		relEvent(cluster, relSvc, "Service", "shop", "web", "", `,"spec":{"selector":{"app":"web"}}`),
		relEvent(cluster, relCM, "ConfigMap", "shop", "cfg", "", `,"data":{}`),
		// Named by every web Pod (relations.Shared): answered, not walked through.
		relEvent(cluster, relCM, "ConfigMap", "shop", "kube-root-ca.crt", "", `,"data":{}`),
		relEvent(cluster, relPods, "Pod", "shop", "api-0", `,"labels":{"app":"api"}`, `,"spec":{"nodeName":"n2","containers":[{"name":"a","image":"api:1"}]},"status":{"phase":"Running"}`),
		relEvent(cluster, relPods, "Pod", "ops", "tool", "", `,"spec":{"containers":[{"name":"a","image":"busybox"},{"name":"b","image":"nginx:1"}]},"status":{"phase":"Succeeded"}`),
	}
	for i := range pods {
		phase := []string{"Running", "Pending", "Running"}[i%3]
		evs = append(evs, relEvent(cluster, relPods, "Pod", "shop", fmt.Sprintf("web-1-%d", i), fmt.Sprintf(`,"labels":{"app":"web","tier":"t%d"}`, i%2)+ownerRef("ReplicaSet", "web-1"),
			fmt.Sprintf(`,"spec":{"nodeName":"n%d","serviceAccountName":"default","volumes":[{"name":"c","configMap":{"name":"cfg"}},{"name":"s","secret":{"secretName":"db"}},{"name":"t","projected":{"sources":[{"configMap":{"name":"kube-root-ca.crt"}}]}}],"containers":[{"name":"a","image":"nginx:%d"}]},"status":{"phase":%q}`, i%2, 1+i%2, phase)))
	}
	return evs
}

// TestOpenSearchCountsAndRelationsAgreeWithBadger applies the same
// objects to a real OpenSearch node and to a Badger store (relations and
// value index on), then asks both for counts (answered by OpenSearch's
// aggregations), related objects and relation field selectors, for an
// unrestricted caller and for one who reads Pods and ReplicaSets of c1
// only: the answers are equal, and the counts are those of the objects
// applied. Documents of the previous mapping are never read as relating
// to nothing.
func TestOpenSearchCountsAndRelationsAgreeWithBadger(t *testing.T) {
	node := osNode.get(t)
	ctx := context.Background()
	// Two groups per aggregation request: every count pages.
	// Indices of its own on the shared node (TestServeReroutesResources
	// has the default ones).
	ost, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, IndexPrefix: "rel-", CheckpointIndex: "fleetview-rel-checkpoints",
		CountPage: 2, Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ost.Close()
	bst, err := badger.Open(badger.Options{Dir: t.TempDir(), ValueIndex: badger.DefaultValueIndex(), Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer bst.Close()
	brd := bst.Reader(badger.ReaderOptions{})
	defer brd.Close()
	podsIn := map[string]int{"c1": 5, "c2": 2}
	for _, c := range []string{"c1", "c2"} {
		evs := relFleet(c, podsIn[c])
		b := make([]feed.Event, len(evs))
		for i, e := range evs {
			b[i] = feed.Event{Seq: uint64(i + 1), Event: e}
		}
		if err := ost.Apply(ctx, c, b, uint64(len(b))); err != nil {
			t.Fatal(err)
		}
		if err := bst.Apply(ctx, c, b, uint64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	carol := &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "replicasets"}}, Clusters: []string{"c1"}}}}
	callers := []struct {
		name string
		vis  *query.Visibility
	}{{"unrestricted", nil}, {"carol (pods and replicasets of c1)", carol}}

	t.Run("counts", func(t *testing.T) {
		dims := func(s ...string) []query.Dimension {
			out := make([]query.Dimension, len(s))
			for i, d := range s {
				var err error
				if out[i], err = query.ParseDimension(d); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		web, _ := labels.Parse("app=web")
		notAPI, _ := labels.Parse("app!=api")
		nameNot, err := query.CompileFields(relPods, "metadata.name!=web-1-0")
		if err != nil {
			t.Fatal(err)
		}
		allPods := podsIn["c1"] + podsIn["c2"] + 4
		cases := []struct {
			name   string
			o      query.CountOptions
			total  map[string]int64 // by caller
			onKeys bool             // OpenSearch answers from its aggregations
		}{
			{"pods by cluster x phase", query.CountOptions{GVR: relPods, By: dims("cluster", "field:status.phase")}, map[string]int64{"unrestricted": int64(allPods), "carol": 7}, true},
			{"pods by image", query.CountOptions{GVR: relPods, By: dims("image")}, map[string]int64{"unrestricted": int64(allPods), "carol": 7}, true},
			{"pods by namespace x label app x kind", query.CountOptions{GVR: relPods, By: dims("namespace", "label:app", "kind")}, map[string]int64{"unrestricted": int64(allPods), "carol": 7}, true},
			{"pods app=web by node", query.CountOptions{GVR: relPods, Labels: web, By: dims("field:spec.nodeName", "label:tier")}, map[string]int64{"unrestricted": 7, "carol": 5}, true},
			{"pods app!=api, name!=web-1-0, in shop", query.CountOptions{GVR: relPods, Namespace: "shop", Labels: notAPI, Fields: nameNot, By: dims("cluster")}, map[string]int64{"unrestricted": 5, "carol": 4}, true},
			{"replicasets by cluster", query.CountOptions{GVR: relRS, By: dims("cluster")}, map[string]int64{"unrestricted": 2, "carol": 1}, true},
			{"deployments by image (read from the objects)", query.CountOptions{GVR: relDeploy, By: dims("image")}, map[string]int64{"unrestricted": 2, "carol": 0}, false},
		}
		for _, c := range callers {
			for _, tc := range cases {
				t.Run(c.name+" "+tc.name, func(t *testing.T) {
					o := tc.o
					o.Visible = c.vis
					want, err := brd.Count(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					got, err := ost.Count(ctx, o)
					if !tc.onKeys {
						if !errors.Is(err, store.ErrCountUnindexed) {
							t.Fatalf("OpenSearch counted %v from its keywords (%v): want ErrCountUnindexed", o.By, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if got.Scanned != "index" {
						t.Errorf("scanned %q, want index", got.Scanned)
					}
					if fmt.Sprint(got.Rows) != fmt.Sprint(want.Rows) || got.Total != want.Total {
						t.Errorf("OpenSearch %v total %d\nBadger     %v total %d", got.Rows, got.Total, want.Rows, want.Total)
					}
					who := strings.Fields(c.name)[0]
					if got.Total != tc.total[who] {
						t.Errorf("total %d, want %d (the objects applied)", got.Total, tc.total[who])
					}
				})
			}
		}
	})

	t.Run("related", func(t *testing.T) {
		proved := map[string]bool{}
		defer func() {
			for _, c := range callers {
				if !proved[c.name] {
					t.Errorf("%s: no start has an edge", c.name)
				}
			}
		}()
		starts := []struct {
			gvr   schema.GroupVersionResource
			name  string
			depth int
		}{
			{relDeploy, "web", 3}, {relRS, "web-1", 2}, {relPods, "web-1-0", 2}, {relSvc, "web", 1}, {relCM, "cfg", 2}, {relPods, "api-0", 1},
			{relCM, "kube-root-ca.crt", 1}, {relCM, "kube-root-ca.crt", 3},
		}
		for _, c := range callers {
			for _, s := range starts {
				t.Run(fmt.Sprintf("%s %s %s depth %d", c.name, s.gvr.Resource, s.name, s.depth), func(t *testing.T) {
					o := query.RelatedOptions{GVR: s.gvr, Namespace: "shop", Name: s.name, Cluster: "c1", Depth: s.depth, Visible: c.vis}
					want, werr := brd.Related(ctx, o)
					got, gerr := ost.Related(ctx, o)
					if werr != nil || gerr != nil {
						if fmt.Sprint(werr) != fmt.Sprint(gerr) {
							t.Fatalf("OpenSearch %v, Badger %v", gerr, werr)
						}
						return
					}
					if c.vis == nil && len(want.Edges) == 0 {
						t.Fatal("no edge expected: the case proves nothing")
					}
					proved[c.name] = proved[c.name] || len(want.Edges) > 0
					if g, w := graphText(got), graphText(want); g != w {
						t.Errorf("OpenSearch:\n%s\nBadger:\n%s", g, w)
					}
				})
			}
		}
	})

	t.Run("relation field selectors", func(t *testing.T) {
		for _, c := range callers {
			for _, sel := range []string{"fleetview.io/ownedBy=Deployment/web", "fleetview.io/ownedBy=ReplicaSet/web-1", "fleetview.io/selectedBy=Service/web",
				"fleetview.io/references=Secret/db", "fleetview.io/references=configmap/cfg",
				"fleetview.io/references=configmap/kube-root-ca.crt", "fleetview.io/references=serviceaccount/default"} {
				t.Run(c.name+" "+sel, func(t *testing.T) {
					f, err := query.CompileFields(relPods, sel)
					if err != nil {
						t.Fatal(err)
					}
					o := query.ListOptions{GVR: relPods, Fields: f.WithRelationVisibility(c.vis), Visible: c.vis}
					names := func(r interface {
						List(context.Context, query.ListOptions) (query.Page, error)
					}) []string {
						p, err := r.List(ctx, o)
						if err != nil {
							t.Fatal(err)
						}
						var out []string
						for _, it := range p.Items {
							var m struct {
								Metadata struct{ Namespace, Name string }
							}
							if err := json.Unmarshal(it.JSON, &m); err != nil {
								t.Fatal(err)
							}
							out = append(out, it.Cluster+"/"+m.Metadata.Namespace+"/"+m.Metadata.Name)
						}
						slices.Sort(out)
						return out
					}
					want, got := names(brd), names(ost)
					if c.vis == nil && len(want) == 0 {
						t.Fatal("no Pod expected: the case proves nothing")
					}
					if !slices.Equal(got, want) {
						t.Errorf("OpenSearch %v\nBadger     %v", got, want)
					}
				})
			}
		}
	})
	// Documents written before the count and relation fields were kept
	// (mapping version 1; indices of their own prefix on the same node)
	// are never read as relating to nothing: a count is made by listing
	// (store.ErrCountUnindexed) and a relation read is ErrNotKept, saying
	// how to refill.
	t.Run("documents of mapping version 1", func(t *testing.T) {
		// A document as the previous version wrote it: no fleetview.key.
		doc := `{"kind":"Pod","metadata":{"name":"old","namespace":"shop"},"fleetview":{"cluster":"c1","group":"","version":"v1","resource":"pods","gvr":"/v1/pods","labels":[],"labelKeys":[],"seq":1,"object":"{}"}}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, node.URL()+"/v1-pod/_doc/c1%2Fold?refresh=true", strings.NewReader(doc))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("put old document: %d", resp.StatusCode)
		}
		old, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, IndexPrefix: "v1-", CheckpointIndex: "v1-checkpoints", Logger: fixture.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		by, _ := query.ParseDimension("field:status.phase")
		if _, err := old.Count(ctx, query.CountOptions{GVR: relPods, By: []query.Dimension{by}}); !errors.Is(err, store.ErrCountUnindexed) {
			t.Errorf("count: %v, want ErrCountUnindexed", err)
		}
		if _, err := old.Related(ctx, query.RelatedOptions{GVR: relPods, Namespace: "shop", Name: "old", Cluster: "c1"}); !errors.Is(err, query.ErrNotKept) {
			t.Errorf("related: %v, want ErrNotKept", err)
		}
		f, _ := query.CompileFields(relPods, "fleetview.io/ownedBy=ReplicaSet/web-1")
		if _, err := old.List(ctx, query.ListOptions{GVR: relPods, Fields: f}); !errors.Is(err, query.ErrNotKept) {
			t.Errorf("list by relation: %v, want ErrNotKept", err)
		}
	})
}

// graphText is a graph's nodes and edges, sorted.
func graphText(g query.Graph) string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, fmt.Sprintf("node %s cached=%v uid=%s", n.ID(), n.Cached, n.UID))
	}
	for _, e := range g.Edges {
		out = append(out, "edge "+e.Type+" "+e.From+" -> "+e.To)
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
