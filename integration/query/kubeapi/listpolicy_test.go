package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// listPolicyPods are the Pods each member holds in TestKubeListPolicy:
// more than one budget read (5,000) across the fleet, more than the small
// budget (2,000) in each member, and no whole number of pages of 500.
var listPolicyPods = map[string]int{"member1": 2600, "member2": 3000}

// TestKubeListPolicy drives kubectl, client-go reflectors and the REST and
// gRPC lists against hubs of each list policy (issue #44), in front of two
// real members holding 5,600 Pods: a paged kubectl, a reflector's paged
// initial list and a script following continue get every object the
// members hold, once; an answer holds up to the budget, not the page size
// asked; strict paging answers at most limit; REST and gRPC keep their
// pages.
func TestKubeListPolicy(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "lp-a", "lp-b")
	for name, n := range listPolicyPods {
		c := fleet.Cluster(name)
		if err := c.StorePods(ctx, n, 2, func(i int) (*corev1.Pod, error) {
			p := fixture.QPod([]string{"lp-a", "lp-b"}[i%2], fmt.Sprintf("p%05d", i), "web", "node-a")
			harness.DefaultPod(p)
			return p, nil
		}); err != nil {
			t.Fatalf("store pods in %s: %v", name, err)
		}
	}
	// What the members hold: cluster/namespace/name, from their own lists.
	truth := func(t *testing.T, clusters ...string) []string {
		t.Helper()
		var keys []string
		for _, name := range clusters {
			l, err := fleet.Cluster(name).Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				keys = append(keys, name+"/"+p.Namespace+"/"+p.Name)
			}
		}
		slices.Sort(keys)
		return keys
	}
	all, member1 := truth(t, "member1", "member2"), truth(t, "member1")
	if len(all) != 5600 || len(member1) != 2600 {
		t.Fatalf("members hold %d Pods (%d in member1), want 5600 (2600)", len(all), len(member1))
	}

	for _, hub := range []struct {
		name   string
		policy app.ListPolicyOptions
		// kubectlGets are the list requests of a paged kubectl get of
		// the fleet, and of member1's view.
		fleetGets, member1Gets int
		// rawLimit500 is what one answer to limit=500 holds.
		rawLimit500 int
	}{
		{name: "default budget", fleetGets: 1, member1Gets: 1, rawLimit500: 5600},
		{name: "budget of 2,000 objects", policy: app.ListPolicyOptions{BudgetObjects: 2000}, fleetGets: 3, member1Gets: 2, rawLimit500: 2000},
		{name: "strict", policy: app.ListPolicyOptions{Policy: app.ListPagesStrict}, fleetGets: 12, member1Gets: 6, rawLimit500: 500},
	} {
		t.Run(hub.name, func(t *testing.T) {
			o := fixture.UpOptions(t, fleet, t.TempDir())
			o.KubeLists = hub.policy
			fv := fixture.StartUp(t, o)
			defer fv.Stop(t)
			fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
				"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "pods"},
				"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2"}},
					"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}},
			})
			// Synced is the members' lists stored: wait for every Pod to be
			// served before counting requests.
			fixture.Eventually(t, 120*time.Second, func() error {
				resp, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 1})
				if err != nil {
					return err
				}
				if n := resp.GetRemainingItemCount() + 1; n != int64(len(all)) {
					return fmt.Errorf("%d Pods cached, want %d", n, len(all))
				}
				return nil
			})
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: fv.REST, Output: kc}, io.Discard); err != nil {
				t.Fatalf("fleetview kubeconfig: %v", err)
			}
			cacheDir := t.TempDir()

			for _, tc := range []struct {
				name string
				args []string
				want []string
				gets int
			}{
				{"kubectl's default", []string{"get", "pods", "-A"}, all, hub.fleetGets},
				{"--chunk-size=500", []string{"get", "pods", "-A", "--chunk-size=500"}, all, hub.fleetGets},
				{"member1's view", []string{"--context", "member1", "get", "pods", "-A"}, member1, hub.member1Gets},
			} {
				t.Run(tc.name, func(t *testing.T) {
					rows, gets := kubectlList(t, ctx, kc, cacheDir, tc.args...)
					if len(rows) != len(tc.want) || !slices.Equal(rows, tc.want) {
						t.Fatalf("%d rows, want the members' %d (first difference at %d)", len(rows), len(tc.want), firstDiff(rows, tc.want))
					}
					if len(gets) != tc.gets {
						t.Fatalf("%d list requests, want %d:\n%s", len(gets), tc.gets, strings.Join(gets, "\n"))
					}
					if !strings.Contains(gets[0], "limit=500") {
						t.Fatalf("kubectl did not page: %s", gets[0])
					}
				})
			}

			t.Run("a script following continue", func(t *testing.T) {
				var names []string
				cont, answers := "", 0
				for {
					path := "/api/v1/pods?limit=500"
					if cont != "" {
						path += "&continue=" + cont
					}
					var l struct {
						Metadata metav1.ListMeta
						Items    []corev1.Pod
					}
					if code, err := fv.RESTGet(path, &l); err != nil || code != 200 {
						t.Fatalf("%s: %d %v", path, code, err)
					}
					if answers == 0 && len(l.Items) != hub.rawLimit500 {
						t.Fatalf("limit=500 answered %d objects, want %d", len(l.Items), hub.rawLimit500)
					}
					if len(l.Items) > 500 && hub.policy.Policy == app.ListPagesStrict {
						t.Fatalf("strict paging answered %d objects to limit=500", len(l.Items))
					}
					for _, p := range l.Items {
						names = append(names, p.Annotations["fleetview.io/cluster"]+"/"+p.Namespace+"/"+p.Name)
					}
					answers++
					if cont = l.Metadata.Continue; cont == "" {
						break
					}
					if left := int64(len(all) - len(names)); l.Metadata.RemainingItemCount == nil || *l.Metadata.RemainingItemCount != left {
						t.Fatalf("remainingItemCount %v after %d objects, want %d", l.Metadata.RemainingItemCount, len(names), left)
					}
				}
				slices.Sort(names)
				if !slices.Equal(names, all) {
					t.Fatalf("%d objects in %d answers, want the members' %d (first difference at %d)", len(names), answers, len(all), firstDiff(names, all))
				}
			})

			t.Run("REST and gRPC keep their pages", func(t *testing.T) {
				var page struct {
					Items    []json.RawMessage
					Continue string
				}
				if code, err := fv.RESTGet("/v1/resources/core/v1/pods?limit=500", &page); err != nil || code != 200 {
					t.Fatalf("REST: %d %v", code, err)
				}
				if len(page.Items) != 500 || page.Continue == "" {
					t.Fatalf("REST limit=500: %d items, continue %q", len(page.Items), page.Continue)
				}
				resp, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 500})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.GetRawItems()) != 500 || resp.GetContinue() == "" {
					t.Fatalf("gRPC limit=500: %d items, continue %q", len(resp.GetRawItems()), resp.GetContinue())
				}
			})

			for _, rc := range []struct {
				name, view, contentType, cluster string
				want                             []string
			}{
				{"a protobuf reflector on the fleet view", "", runtime.ContentTypeProtobuf, "", all},
				{"a JSON reflector on member1's view", "/clusters/member1", runtime.ContentTypeJSON, "member1", member1},
			} {
				t.Run(rc.name, func(t *testing.T) {
					reflectorListsThenWatches(t, ctx, fleet, &rest.Config{Host: fv.REST + rc.view, ContentConfig: rest.ContentConfig{ContentType: rc.contentType}},
						rc.want, hub.policy.Policy == app.ListPagesStrict)
				})
			}
		})
	}
}

// kubectlGet matches kubectl -v=6's log line of a Pod list request.
var kubectlGet = regexp.MustCompile(`\] GET \S*/pods\?\S*`)

// kubectlList runs kubectl (-v=6, --no-headers) and returns its rows as
// sorted cluster/namespace/name, and its list requests.
func kubectlList(t *testing.T, ctx context.Context, kc, cacheDir string, args ...string) (rows, gets []string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, fixture.KubectlBin, append(append([]string{"--kubeconfig", kc, "--cache-dir", cacheDir}, args...), "-v=6", "--no-headers")...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		// NAMESPACE CLUSTER NAME ...
		f := strings.Fields(l)
		if len(f) < 3 {
			t.Fatalf("row %q", l)
		}
		rows = append(rows, f[1]+"/"+f[0]+"/"+f[2])
	}
	slices.Sort(rows)
	gets = kubectlGet.FindAllString(errOut.String(), -1)
	return rows, gets
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// pagedListWatch is a ListWatch whose reflector lists (and pages) instead
// of asking for a watch-list stream, as reflectors of clients without
// watch-list do.
type pagedListWatch struct{ *cache.ListWatch }

func (pagedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// reflectorListsThenWatches runs a client-go reflector (a paged initial
// list, 500 a page as client-go asks, then a watch) on cfg and checks its
// store holds want, keyed cluster/namespace/name, then follows a Pod
// created in member1. Under strict paging no answer holds more than 500;
// under the budget the first answer holds more than the page asked.
func reflectorListsThenWatches(t *testing.T, ctx context.Context, fleet *harness.Fleet, cfg *rest.Config, want []string, strict bool) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type listCall struct {
		limit     int64
		continued bool
		items     int
	}
	var lists []listCall
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := cs.CoreV1().Pods("").List(ctx, o)
			if err == nil {
				mu.Lock()
				lists = append(lists, listCall{o.Limit, o.Continue != "", len(l.Items)})
				mu.Unlock()
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods("").Watch(ctx, o)
		},
	}
	key := func(obj any) (string, error) {
		p := obj.(*corev1.Pod)
		return p.Annotations["fleetview.io/cluster"] + "/" + p.Namespace + "/" + p.Name, nil
	}
	store := cache.NewStore(key)
	r := cache.NewReflector(pagedListWatch{lw}, &corev1.Pod{}, store, 0)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(rctx) }()
	defer func() { cancel(); <-done }()
	fixture.Eventually(t, 2*time.Minute, func() error {
		got := store.ListKeys()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("store of %d, want the members' %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
		return nil
	})
	mu.Lock()
	calls := slices.Clone(lists)
	mu.Unlock()
	if len(calls) == 0 || calls[0].limit != 500 || calls[0].continued {
		t.Fatalf("list calls %+v: want a first page of 500 asked", calls)
	}
	for _, c := range calls {
		if strict && c.items > 500 {
			t.Fatalf("strict paging answered %d objects to limit=%d", c.items, c.limit)
		}
	}
	if !strict && calls[0].items <= 500 {
		t.Fatalf("list calls %+v: the budget answered no more than the page asked", calls)
	}
	// Then the watch: a Pod created in member1 arrives.
	name := fmt.Sprintf("lp-new-%d", time.Now().UnixNano())
	if _, err := fleet.Cluster("member1").Clientset().CoreV1().Pods("lp-a").Create(ctx, fixture.QPod("lp-a", name, "web", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// At once: no kubelet would confirm a graceful delete.
		zero := int64(0)
		_ = fleet.Cluster("member1").Clientset().CoreV1().Pods("lp-a").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	fixture.Eventually(t, time.Minute, func() error {
		if _, ok, _ := store.GetByKey("member1/lp-a/" + name); !ok {
			return fmt.Errorf("%s not in the reflector's store", name)
		}
		return nil
	})
}
