package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetview/fleetview/integration/fixture"
)

// TestKubeFieldSelectors checks field selectors on any field path through
// kubectl against what two real members answer: for Pod fields the members
// filter themselves, and the union of their answers is the expected one;
// for a custom resource's field, which no member can filter on, the
// expected answer is computed from each member's own objects.
func TestKubeFieldSelectors(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := members.Get(t) // with shop and the CronTab shop/nightly (no spec.size: compares as "")
	must := fixture.MustOK(t)
	pods := map[string][][2]string{ // name, node ("" is unscheduled)
		"member1": {{"web", "node-a"}, {"db", "node-b"}, {"idle", ""}},
		"member2": {{"web", "node-b"}, {"api", "node-a"}},
	}
	running := map[string]string{"member1": "web", "member2": "api"}
	sizes := map[string][]int64{"member1": {3, 5}, "member2": {3}}
	for _, name := range []string{"member1", "member2"} {
		c := fleet.Cluster(name)
		for _, p := range pods[name] {
			must(c.Clientset().CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", p[0], p[0], p[1]), metav1.CreateOptions{}))
		}
		p, err := c.Clientset().CoreV1().Pods("shop").Get(ctx, running[name], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		must(c.Clientset().CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}))
		for i, size := range sizes[name] {
			ct := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab",
				"metadata": map[string]any{"name": fmt.Sprintf("sized-%d", i), "namespace": "shop"}, "spec": map[string]any{"size": size}}}
			must(c.Dynamic().Resource(fixture.CronTabsGVR).Namespace("shop").Create(ctx, ct, metav1.CreateOptions{}))
		}
	}

	fv := fixture.StartUp(t, fixture.UpOptions(t, fleet, t.TempDir()))
	defer fv.Stop(t)
	fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "fields"},
		"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2"}},
			"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"},
				map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab"}}},
	})
	kubectl := hubKubectl(t, ctx, fv.REST, false)
	rows := func(args ...string) ([]string, error) { return clusterRows(kubectl, args...) }
	// agree waits until kubectl's answer is want (the cache follows the
	// members' changes, status updates included).
	agree := func(t *testing.T, want []string, args ...string) {
		t.Helper()
		if len(want) == 0 {
			t.Fatalf("no object is expected for %v: the test would prove nothing", args)
		}
		fixture.Eventually(t, 60*time.Second, func() error {
			got, err := rows(args...)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("kubectl %s: %v, want %v", strings.Join(args, " "), got, want)
			}
			return nil
		})
	}

	for _, sel := range []string{"status.phase!=Running", "spec.nodeName=node-a", "spec.nodeName=", "status.phase=Running,spec.nodeName!=node-b"} {
		t.Run("pods "+sel+" is the members' own answer", func(t *testing.T) {
			var want []string
			for _, name := range []string{"member1", "member2"} {
				l, err := fleet.Cluster(name).Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, p := range l.Items {
					want = append(want, name+"/"+p.Namespace+"/"+p.Name)
				}
			}
			slices.Sort(want)
			agree(t, want, "get", "pods", "-A", "--field-selector", sel)
		})
	}
	t.Run("a custom resource's spec.size", func(t *testing.T) {
		var want []string
		for _, name := range []string{"member1", "member2"} {
			l, err := fleet.Cluster(name).Dynamic().Resource(fixture.CronTabsGVR).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, o := range l.Items {
				if size, ok, _ := unstructured.NestedInt64(o.Object, "spec", "size"); ok && size == 3 {
					want = append(want, name+"/"+o.GetNamespace()+"/"+o.GetName())
				}
			}
			// The member itself refuses the selector: fleetview's answer
			// is not one a member could give.
			if _, err := fleet.Cluster(name).Dynamic().Resource(fixture.CronTabsGVR).List(ctx, metav1.ListOptions{FieldSelector: "spec.size=3"}); err == nil {
				t.Fatalf("%s filtered a CronTab on spec.size: the expected answer must be computed here", name)
			}
		}
		slices.Sort(want)
		agree(t, want, "get", "crontabs", "-A", "--field-selector", "spec.size=3")
	})
	t.Run("an unsupported operator or a bad path is a 400 naming it", func(t *testing.T) {
		for _, tc := range []struct{ sel, mentions string }{
			{"spec.size>3", "operator >"},
			{"spec..size=3", `field "spec..size"`},
			{"spec.sizes[0]=3", "array indexes"},
		} {
			out, err := kubectl("get", "crontabs", "-A", "--field-selector", tc.sel)
			if err == nil || !strings.Contains(out, "BadRequest") || !strings.Contains(out, tc.mentions) {
				t.Errorf("kubectl --field-selector %s: %v %s: want a BadRequest naming %s", tc.sel, err, out, tc.mentions)
			}
			resp, err := http.Get(fv.REST + "/apis/stable.example.com/v1/crontabs?fieldSelector=" + url.QueryEscape(tc.sel))
			if err != nil {
				t.Fatal(err)
			}
			var st metav1.Status
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest ||
				!strings.Contains(st.Message, tc.sel) || !strings.Contains(st.Message, tc.mentions) {
				t.Errorf("GET fieldSelector=%s: %d %+v %v: want 400 BadRequest naming the selector and %s", tc.sel, resp.StatusCode, st, err, tc.mentions)
			}
		}
	})
}
