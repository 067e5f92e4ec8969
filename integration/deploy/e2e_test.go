package deploy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func daemonSet(ns, name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: fixture.Labels(name)},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: fixture.Labels(name)}, Template: fixture.PodTemplate(name)}}
}

func ingress(ns, name string) *networkingv1.Ingress {
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
}

// populate creates the objects of the end-to-end scenario.
func populate(t *testing.T, ctx context.Context, fleet *harness.Fleet) {
	t.Helper()
	must := fixture.MustOK(t)
	for _, name := range fixture.Members {
		cs := fleet.Cluster(name).Clientset()
		for _, ns := range []string{"app1", "app2"} {
			must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
		}
	}
	c1, c2, c3 := fleet.Cluster("member1").Clientset(), fleet.Cluster("member2").Clientset(), fleet.Cluster("member3").Clientset()
	must(c1.CoreV1().Pods("app1").Create(ctx, fixture.Pod("app1", "web", "web"), metav1.CreateOptions{}))
	must(c1.CoreV1().Pods("app2").Create(ctx, fixture.Pod("app2", "db", "db"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("app1").Create(ctx, fixture.Pod("app1", "web", "web"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("app1").Create(ctx, fixture.Pod("app1", "api", "api"), metav1.CreateOptions{}))
	must(c3.CoreV1().Pods("kube-system").Create(ctx, fixture.Pod("kube-system", "proxy", "proxy"), metav1.CreateOptions{}))
	must(c1.AppsV1().Deployments("app1").Create(ctx, fixture.Deployment("app1", "web"), metav1.CreateOptions{}))
	must(c3.AppsV1().Deployments("kube-system").Create(ctx, fixture.Deployment("kube-system", "coredns"), metav1.CreateOptions{}))
	must(c2.NetworkingV1().Ingresses("app1").Create(ctx, ingress("app1", "web"), metav1.CreateOptions{}))
	must(c1.AppsV1().DaemonSets("kube-system").Create(ctx, daemonSet("kube-system", "node-agent"), metav1.CreateOptions{}))
	must(c2.AppsV1().DaemonSets("kube-system").Create(ctx, daemonSet("kube-system", "node-agent"), metav1.CreateOptions{}))
	// Outside the DaemonSet selector's namespace: must never be cached.
	must(c1.AppsV1().DaemonSets("app1").Create(ctx, daemonSet("app1", "logger"), metav1.CreateOptions{}))
	must(c3.AppsV1().DaemonSets("app2").Create(ctx, daemonSet("app2", "logger"), metav1.CreateOptions{}))
}

// streamObjects counts the messages ever stored in each member's stream.
func streamSeqs(t *testing.T, natsURL string) map[string]uint64 {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	out := map[string]uint64{}
	for _, m := range fixture.Members {
		st, err := js.Stream(context.Background(), stream.StreamName(m))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[m] = info.State.LastSeq
	}
	return out
}

func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, fixture.Members...)
	populate(t, ctx, fleet)

	opts := fixture.UpOptions(t, fleet, t.TempDir())
	fv := fixture.StartUp(t, opts)
	// The seed registry verbatim, minus its backendStore (it names an
	// OpenSearch at localhost:9200; the OpenSearch tests cover that path).
	fv.ApplyFile(t, fixture.RepoPath(t, "internal", "registry", "testdata", "seed-registry-no-backend.yaml"))

	allPods := fixture.Refs(
		fixture.Ref{Cluster: "member1", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member1", Namespace: "app2", Name: "db"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"},
		fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "api"}, fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "proxy"})
	fixture.Eventually(t, 90*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, allPods)
	})

	t.Run("list over gRPC and REST", func(t *testing.T) {
		cases := []struct {
			name string
			req  *fleetviewv1.ListRequest
			path string
			want []string
		}{
			{"all pods", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}, "/v1/resources/core/v1/pods", allPods},
			{"namespace", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "app1"}, "/v1/resources/core/v1/pods?namespace=app1",
				fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "api"})},
			{"label selector", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app=web"}, "/v1/resources/core/v1/pods?labelSelector=app%3Dweb",
				fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"})},
			{"set-based selector", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app notin (web,db)"}, "/v1/resources/core/v1/pods?labelSelector=app+notin+%28web%2Cdb%29",
				fixture.Refs(fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "api"}, fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "proxy"})},
			{"clusters", &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: []string{"member2", "member3"}}, "/v1/resources/core/v1/pods?clusters=member2&clusters=member3",
				fixture.Refs(fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "api"}, fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "proxy"})},
			{"deployments", &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments"}, "/v1/resources/apps/v1/deployments",
				fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "app1", Name: "web"}, fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "coredns"})},
			{"ingresses", &fleetviewv1.ListRequest{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, "/v1/resources/networking.k8s.io/v1/ingresses",
				fixture.Refs(fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"})},
			{"daemonsets only in kube-system", &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "daemonsets"}, "/v1/resources/apps/v1/daemonsets",
				fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "kube-system", Name: "node-agent"}, fixture.Ref{Cluster: "member2", Namespace: "kube-system", Name: "node-agent"})},
			{"not selected by the registry", &fleetviewv1.ListRequest{Version: "v1", Resource: "services"}, "/v1/resources/core/v1/services", fixture.Refs()},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				fixture.Eventually(t, 60*time.Second, func() error {
					got, err := fixture.GRPCList(ctx, fv, tc.req)
					if err != nil {
						return fmt.Errorf("grpc: %w", err)
					}
					if err := fixture.SameSet(got, tc.want); err != nil {
						return fmt.Errorf("grpc: %w", err)
					}
					got, err = fixture.RESTList(fv, tc.path)
					if err != nil {
						return fmt.Errorf("rest: %w", err)
					}
					if err := fixture.SameSet(got, tc.want); err != nil {
						return fmt.Errorf("rest: %w", err)
					}
					return nil
				})
			})
		}
	})

	t.Run("paging", func(t *testing.T) {
		var pages [][]string
		var all []string
		cont := ""
		for {
			resp, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 2, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			var page []string
			for _, it := range resp.GetRawItems() {
				r, err := fixture.ObjectRef(fixture.RawMap(it))
				if err != nil {
					t.Fatal(err)
				}
				page = append(page, r.String())
			}
			pages = append(pages, page)
			all = append(all, page...)
			if cont = resp.GetContinue(); cont == "" {
				break
			}
			if len(pages) > 10 {
				t.Fatal("paging does not terminate")
			}
		}
		if len(pages) != 3 || len(pages[0]) != 2 || len(pages[2]) != 1 {
			t.Fatalf("pages %v, want sizes 2,2,1", pages)
		}
		sort.Strings(all)
		if err := fixture.SameSet(all, allPods); err != nil {
			t.Fatal(err)
		}
		if _, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Continue: "%%%"}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("bad continue token: got %v, want InvalidArgument", err)
		}
	})

	t.Run("get", func(t *testing.T) {
		// The Struct form, for clients that ask for it.
		resp, err := fv.Query.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "app1", Name: "web", Cluster: "member2", Structured: true})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := fixture.ObjectRef(resp.GetObject().AsMap()); err != nil || r != (fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "web"}) {
			t.Fatalf("got %v %v", r, err)
		}
		resp, err = fv.Query.Get(ctx, &fleetviewv1.GetRequest{Group: "core", Version: "v1", Resource: "pods", Namespace: "app2", Name: "db"})
		if err != nil || resp.GetCluster() != "member1" {
			t.Fatalf("unqualified unique get: %v %v", resp.GetCluster(), err)
		}
		_, err = fv.Query.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "app1", Name: "web"})
		if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "member1, member2") {
			t.Fatalf("ambiguous get: got %v, want a conflict naming member1, member2", err)
		}
		_, err = fv.Query.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "app1", Name: "nope"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("missing object: got %v, want NotFound", err)
		}
		var obj map[string]any
		if code, err := fv.RESTGet("/v1/resources/core/v1/pods/web?namespace=app1", &obj); code != http.StatusConflict {
			t.Fatalf("REST ambiguous get: %d %v, want 409", code, err)
		}
		if code, err := fv.RESTGet("/v1/resources/core/v1/pods/nope?namespace=app1", &obj); code != http.StatusNotFound {
			t.Fatalf("REST missing get: %d %v, want 404", code, err)
		}
		var got struct {
			Object  map[string]any `json:"object"`
			Cluster string         `json:"cluster"`
		}
		if _, err := fv.RESTGet("/v1/resources/apps/v1/deployments/coredns?namespace=kube-system", &got); err != nil || got.Cluster != "member3" {
			t.Fatalf("REST get: %+v %v", got.Cluster, err)
		}
		if r, err := fixture.ObjectRef(got.Object); err != nil || r != (fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "coredns"}) {
			t.Fatalf("REST get object: %v %v", r, err)
		}
	})

	t.Run("clusters", func(t *testing.T) {
		fixture.Eventually(t, 60*time.Second, func() error {
			resp, err := fv.Clusters.ListClusters(ctx, &fleetviewv1.ListClustersRequest{})
			if err != nil {
				return err
			}
			if len(resp.GetClusters()) != 3 {
				return fmt.Errorf("%d clusters", len(resp.GetClusters()))
			}
			for i, c := range resp.GetClusters() {
				if c.GetName() != fixture.Members[i] || !c.GetReady() || c.GetKubernetesVersion() != "v1.37.2" {
					return fmt.Errorf("cluster %d: %s ready=%v version=%s", i, c.GetName(), c.GetReady(), c.GetKubernetesVersion())
				}
				if len(c.GetResources()) != 4 {
					return fmt.Errorf("%s: %d resources, want 4", c.GetName(), len(c.GetResources()))
				}
				// The collector's discovery reaches the API: the core group and
				// the groups the registry selects from.
				for _, gv := range []string{"v1", "apps/v1", "networking.k8s.io/v1"} {
					if !slices.Contains(c.GetServedApis(), gv) {
						return fmt.Errorf("%s: served APIs %v lack %s", c.GetName(), c.GetServedApis(), gv)
					}
				}
				for _, r := range c.GetResources() {
					if !r.GetSynced() {
						return fmt.Errorf("%s: %s not synced", c.GetName(), r.GetGvr())
					}
				}
				if c.GetAppliedSequence() == 0 || c.GetAppliedSequence() != c.GetStreamSequence() {
					return fmt.Errorf("%s: applied %d of %d", c.GetName(), c.GetAppliedSequence(), c.GetStreamSequence())
				}
			}
			return nil
		})
	})

	t.Run("update and delete are reflected", func(t *testing.T) {
		must := fixture.MustOK(t)
		cs := fleet.Cluster("member2").Clientset()
		p, err := cs.CoreV1().Pods("app1").Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["app"] = "api-v2"
		must(cs.CoreV1().Pods("app1").Update(ctx, p, metav1.UpdateOptions{}))
		if err := fleet.Cluster("member1").Clientset().AppsV1().Deployments("app1").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 60*time.Second, func() error {
			got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app=api-v2"})
			if err != nil {
				return err
			}
			if err := fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member2", Namespace: "app1", Name: "api"})); err != nil {
				return err
			}
			if got, _ := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app=api"}); len(got) != 0 {
				return fmt.Errorf("old label still indexed: %v", got)
			}
			got, err = fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments"})
			if err != nil {
				return err
			}
			return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "coredns"}))
		})
	})

	t.Run("restart resumes without re-ingesting", func(t *testing.T) {
		natsURL := fmt.Sprintf("nats://127.0.0.1:%d", opts.NATSPort)
		before := streamSeqs(t, natsURL)
		fv.Stop(t)
		fv = fixture.StartUp(t, opts)
		// Served from the state dir at once, before any collector resynced.
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(allPods) {
			t.Fatalf("after restart: %v", got)
		}
		// Change one object while... after the restart, then wait for sync.
		cs := fleet.Cluster("member3").Clientset()
		must := fixture.MustOK(t)
		must(cs.CoreV1().Pods("kube-system").Create(ctx, fixture.Pod("kube-system", "late", "late"), metav1.CreateOptions{}))
		fixture.Eventually(t, 60*time.Second, func() error {
			got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Clusters: []string{"member3"}})
			if err != nil {
				return err
			}
			return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "proxy"}, fixture.Ref{Cluster: "member3", Namespace: "kube-system", Name: "late"}))
		})
		fixture.Eventually(t, 60*time.Second, func() error {
			resp, err := fv.Clusters.ListClusters(ctx, &fleetviewv1.ListClustersRequest{})
			if err != nil {
				return err
			}
			for _, c := range resp.GetClusters() {
				for _, r := range c.GetResources() {
					if !r.GetSynced() {
						return fmt.Errorf("%s: %s not synced", c.GetName(), r.GetGvr())
					}
				}
			}
			return nil
		})
		after := streamSeqs(t, natsURL)
		// Each collector republishes nothing it had published: only one sync
		// marker per resource (4), plus the one new Pod in member3.
		for _, m := range fixture.Members {
			want := before[m] + 4
			if m == "member3" {
				want++
			}
			if after[m] != want {
				t.Errorf("%s: stream went from %d to %d messages, want %d (re-ingested?)", m, before[m], after[m], want)
			}
		}
		fv.Stop(t)
	})
}
