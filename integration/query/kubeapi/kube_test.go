package kubeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
)

// TestKubeAPI drives Debian's kubectl against fleetview's Kubernetes API in
// front of two real member clusters.
func TestKubeAPI(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop")
	must := fixture.MustOK(t)
	c1, c2 := fleet.Cluster("member1").Clientset(), fleet.Cluster("member2").Clientset()
	must(c1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-a"), metav1.CreateOptions{}))
	must(c1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "db", "db", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "api", "api", "node-a"), metav1.CreateOptions{}))
	must(c1.AppsV1().Deployments("shop").Create(ctx, fixture.Deployment("shop", "cart"), metav1.CreateOptions{}))
	// A custom resource with short names and a category; member2's CRD has
	// one short name more, which discovery does not offer: a custom
	// resource's short names are those all its clusters agree on, so no
	// one cluster's record can add a name.
	fixture.InstallCronTabs(t, ctx, fleet.Cluster("member1"), []string{"ct"}, "nightly")
	fixture.InstallCronTabs(t, ctx, fleet.Cluster("member2"), []string{"ct", "ctab"}, "hourly")

	fv := fixture.StartUp(t, fixture.UpOptions(t, fleet, t.TempDir()))
	defer fv.Stop(t)
	fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "kube"},
		"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2"}},
			"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"},
				map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab"}}},
	})
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: fv.REST, Output: kc}, io.Discard); err != nil {
		t.Fatalf("fleetview kubeconfig: %v", err)
	}
	cacheDir := t.TempDir()
	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		// A cache of its own: kubectl caches discovery by host:port, which
		// other runs may have used.
		out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--cache-dir", cacheDir}, args...)...).CombinedOutput()
		return string(out), err
	}
	ok := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// rowsOf checks the header and returns "cluster/namespace/name" of rows.
	rowsOf := func(t *testing.T, out string, header ...string) []string {
		t.Helper()
		rows := fixture.TableRows(out)
		if len(rows) == 0 || !slices.Equal(rows[0][:len(header)], header) {
			t.Fatalf("header: want %v first in\n%s", header, out)
		}
		var got []string
		for _, r := range rows[1:] {
			got = append(got, r[1]+"/"+r[0]+"/"+r[2])
		}
		slices.Sort(got)
		return got
	}

	t.Run("get pods -A prints CLUSTER first and rows of every cluster", func(t *testing.T) {
		out := ok(t, "get", "pods", "-A")
		got := rowsOf(t, out, "NAMESPACE", "CLUSTER", "NAME", "READY", "STATUS", "RESTARTS", "AGE")
		want := []string{"member1/shop/db", "member1/shop/web", "member2/shop/api", "member2/shop/web"}
		if !slices.Equal(got, want) {
			t.Fatalf("rows %v, want %v\n%s", got, want, out)
		}
		if r := fixture.TableRows(out)[1]; r[3] != "0/1" || r[4] != "Pending" {
			t.Fatalf("READY/STATUS of %v, want 0/1 Pending", r)
		}
	})
	t.Run("label and field selectors", func(t *testing.T) {
		got := rowsOf(t, ok(t, "get", "pods", "-A", "-l", "app=web"), "NAMESPACE", "CLUSTER", "NAME")
		if want := []string{"member1/shop/web", "member2/shop/web"}; !slices.Equal(got, want) {
			t.Fatalf("-l app=web: %v, want %v", got, want)
		}
		got = rowsOf(t, ok(t, "get", "pods", "-A", "--field-selector", "spec.nodeName=node-a"), "NAMESPACE", "CLUSTER", "NAME")
		if want := []string{"member1/shop/web", "member2/shop/api"}; !slices.Equal(got, want) {
			t.Fatalf("--field-selector spec.nodeName=node-a: %v, want %v", got, want)
		}
		got = rowsOf(t, ok(t, "get", "pods", "-A", "--field-selector", "metadata.name=api"), "NAMESPACE", "CLUSTER", "NAME")
		if want := []string{"member2/shop/api"}; !slices.Equal(got, want) {
			t.Fatalf("--field-selector metadata.name=api: %v, want %v", got, want)
		}
	})
	t.Run("-o wide, --show-labels and -L", func(t *testing.T) {
		out := ok(t, "get", "pods", "-n", "shop", "-o", "wide")
		rows := fixture.TableRows(out)
		if !slices.Equal(rows[0], []string{"CLUSTER", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"}) {
			t.Fatalf("wide header: %v", rows[0])
		}
		nodes := map[string]string{}
		for _, r := range rows[1:] {
			nodes[r[0]+"/"+r[1]] = r[7]
		}
		if nodes["member1/db"] != "node-b" || nodes["member2/api"] != "node-a" {
			t.Fatalf("NODE column: %v\n%s", nodes, out)
		}
		out = ok(t, "get", "pods", "-n", "shop", "--show-labels")
		if !strings.Contains(out, "LABELS") || !strings.Contains(out, "app=db") {
			t.Fatalf("--show-labels:\n%s", out)
		}
		out = ok(t, "get", "pods", "-n", "shop", "-L", "app")
		if rows := fixture.TableRows(out); rows[0][len(rows[0])-1] != "APP" || rows[1][len(rows[1])-1] == "" {
			t.Fatalf("-L app:\n%s", out)
		}
	})
	t.Run("deployments print their columns", func(t *testing.T) {
		out := ok(t, "get", "deploy", "-n", "shop")
		rows := fixture.TableRows(out)
		if !slices.Equal(rows[0], []string{"CLUSTER", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}) || len(rows) != 2 || rows[1][0] != "member1" || rows[1][1] != "cart" {
			t.Fatalf("get deploy:\n%s", out)
		}
	})
	t.Run("-o json is a PodList of annotated Pods", func(t *testing.T) {
		var list struct {
			APIVersion, Kind string
			Items            []struct {
				APIVersion, Kind string
				Metadata         metav1.ObjectMeta
			}
		}
		out := ok(t, "get", "pods", "-A", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if list.Kind != "List" && list.Kind != "PodList" || len(list.Items) != 4 {
			t.Fatalf("kind %q with %d items", list.Kind, len(list.Items))
		}
		for _, it := range list.Items {
			c := it.Metadata.Annotations["fleetview.io/cluster"]
			if it.APIVersion != "v1" || it.Kind != "Pod" || c == "" || it.Metadata.Annotations["resource.karmada.io/cached-from-cluster"] != c {
				t.Fatalf("item %s %s %s/%s annotations %v", it.APIVersion, it.Kind, it.Metadata.Namespace, it.Metadata.Name, it.Metadata.Annotations)
			}
		}
	})
	t.Run("get by name: unique, ambiguous (Conflict), per cluster", func(t *testing.T) {
		out := ok(t, "get", "pod", "db", "-n", "shop", "-o", "yaml")
		if !strings.Contains(out, "name: db") || !strings.Contains(out, "fleetview.io/cluster: member1") || !strings.Contains(out, "kind: Pod") {
			t.Fatalf("-o yaml:\n%s", out)
		}
		out, err := kubectl("get", "pod", "web", "-n", "shop")
		if err == nil || !strings.Contains(out, "(Conflict)") {
			t.Fatalf("ambiguous get: err %v\n%s", err, out)
		}
		out = ok(t, "--context", "member2", "get", "pod", "web", "-n", "shop")
		if rows := fixture.TableRows(out); len(rows) != 2 || rows[1][0] != "member2" || rows[1][1] != "web" {
			t.Fatalf("per-cluster get:\n%s", out)
		}
		out = ok(t, "--context", "member2", "get", "pods", "-A")
		if got := rowsOf(t, out, "NAMESPACE", "CLUSTER", "NAME"); !slices.Equal(got, []string{"member2/shop/api", "member2/shop/web"}) {
			t.Fatalf("per-cluster list: %v", got)
		}
		out, err = kubectl("get", "pod", "nope", "-n", "shop")
		if err == nil || !strings.Contains(out, "(NotFound)") {
			t.Fatalf("missing pod: err %v\n%s", err, out)
		}
	})
	t.Run("api-resources lists exactly the cached resources", func(t *testing.T) {
		out := ok(t, "api-resources")
		rows := fixture.TableRows(out)
		var got []string
		for _, r := range rows[1:] {
			got = append(got, strings.Join(r, " "))
		}
		want := []string{"crontabs ct stable.example.com/v1 true CronTab", "deployments deploy apps/v1 true Deployment", "pods po v1 true Pod"}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("api-resources: %v, want %v\n%s", got, want, out)
		}
	})
	t.Run("short names and categories are those the members agree on", func(t *testing.T) {
		for _, name := range []string{"ct", "crontab"} {
			got := rowsOf(t, ok(t, "get", name, "-A"), "NAMESPACE", "CLUSTER", "NAME")
			if want := []string{"member1/shop/nightly", "member2/shop/hourly"}; !slices.Equal(got, want) {
				t.Fatalf("get %s -A: %v, want %v", name, got, want)
			}
		}
		if out, err := kubectl("get", "ctab", "-A"); err == nil || !strings.Contains(out, `doesn't have a resource type "ctab"`) {
			t.Fatalf("get ctab (member2's name alone): %v\n%s", err, out)
		}
		// The category of the CRD, and Kubernetes' own "all".
		names := func(args ...string) []string {
			t.Helper()
			got := strings.Fields(ok(t, append([]string{"get", "-A", "-o", "name"}, args...)...))
			slices.Sort(got)
			return slices.Compact(got)
		}
		if got, want := names("fvtest"), []string{"crontab.stable.example.com/hourly", "crontab.stable.example.com/nightly"}; !slices.Equal(got, want) {
			t.Fatalf("get fvtest: %v, want %v", got, want)
		}
		if got, want := names("all"), []string{"deployment.apps/cart", "pod/api", "pod/db", "pod/web"}; !slices.Equal(got, want) {
			t.Fatalf("get all: %v, want %v", got, want)
		}
		// The per-cluster view offers what that cluster reports.
		rows := fixture.TableRows(ok(t, "--context", "member1", "api-resources", "--categories", "fvtest"))
		if len(rows) != 2 || strings.Join(rows[1], " ") != "crontabs ct stable.example.com/v1 true CronTab" {
			t.Fatalf("member1's api-resources of category fvtest: %v", rows)
		}
	})
	t.Run("resourceVersionMatch=Exact serves only the current state", func(t *testing.T) {
		podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		client := func(path string) dynamic.NamespaceableResourceInterface {
			dyn, err := dynamic.NewForConfig(&rest.Config{Host: fv.REST + path})
			if err != nil {
				t.Fatal(err)
			}
			return dyn.Resource(podsGVR)
		}
		fleetPods, member1Pods := client("").Namespace("shop"), client("/clusters/member1").Namespace("shop")
		names := func(l *unstructured.UnstructuredList) []string {
			var out []string
			for _, it := range l.Items {
				out = append(out, it.GetAnnotations()["fleetview.io/cluster"]+"/"+it.GetName())
			}
			slices.Sort(out)
			return out
		}
		l, err := fleetPods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exact := metav1.ListOptions{ResourceVersion: l.GetResourceVersion(), ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		again, err := fleetPods.List(ctx, exact)
		if err != nil {
			t.Fatalf("Exact with the list's own resourceVersion, nothing changed: %v", err)
		}
		if !slices.Equal(names(again), names(l)) {
			t.Fatalf("Exact list %v, want %v", names(again), names(l))
		}
		// A change in member2 moves the fleet's state past the version.
		must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "exact", "exact", ""), metav1.CreateOptions{}))
		defer func() {
			if err := c2.CoreV1().Pods("shop").Delete(ctx, "exact", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Error(err)
			}
			fixture.Eventually(t, 30*time.Second, func() error { // later subtests expect member2 as it was
				l, err := fleetPods.List(ctx, metav1.ListOptions{})
				if err == nil && slices.Contains(names(l), "member2/exact") {
					err = fmt.Errorf("member2/exact still cached")
				}
				return err
			})
		}()
		fixture.Eventually(t, 30*time.Second, func() error {
			l, err := fleetPods.List(ctx, metav1.ListOptions{})
			if err == nil && !slices.Contains(names(l), "member2/exact") {
				err = fmt.Errorf("member2/exact not cached yet: %v", names(l))
			}
			return err
		})
		_, err = fleetPods.List(ctx, exact)
		if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "keeps no history") || !strings.Contains(err.Error(), "NotOlderThan") {
			t.Fatalf("Exact after a change: %v, want 410 Expired saying fleetview keeps no history", err)
		}
		// member1's state is still the version's: its view serves it.
		m1, err := member1Pods.List(ctx, exact)
		if err != nil {
			t.Fatalf("Exact in member1's view, member1 unchanged: %v", err)
		}
		if got := names(m1); !slices.Equal(got, []string{"member1/db", "member1/web"}) {
			t.Fatalf("member1's Exact list %v", got)
		}
	})
	t.Run("delete is MethodNotAllowed", func(t *testing.T) {
		out, err := kubectl("delete", "pod", "db", "-n", "shop")
		if err == nil || !strings.Contains(out, "MethodNotAllowed") {
			t.Fatalf("delete: err %v\n%s", err, out)
		}
		if _, err := c1.CoreV1().Pods("shop").Get(ctx, "db", metav1.GetOptions{}); err != nil {
			t.Fatalf("the member's pod: %v", err)
		}
	})
	t.Run("--watch sees an update arrive", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(wctx, fixture.KubectlBin, "--kubeconfig", kc, "--cache-dir", cacheDir, "get", "pods", "-n", "shop", "--watch", "--output-watch-events")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		var wg sync.WaitGroup
		// Kill kubectl, drain its output, then reap it.
		defer func() { cancel(); wg.Wait(); _ = cmd.Wait() }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				case <-wctx.Done():
				}
			}
		}()
		var seen []string
		await := func(what string, match func([]string) bool) {
			t.Helper()
			for {
				select {
				case l, open := <-lines:
					if !open {
						t.Fatalf("kubectl --watch ended before %s:\n%s", what, strings.Join(seen, "\n"))
					}
					seen = append(seen, l)
					if match(strings.Fields(l)) {
						return
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("no %s within 30s:\n%s", what, strings.Join(seen, "\n"))
				}
			}
		}
		await("initial row of member1/db", func(f []string) bool { return len(f) > 2 && f[1] == "member1" && f[2] == "db" })
		p := fixture.QPod("shop", "late", "late", "node-c")
		must(c2.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}))
		// The hub may report a creation it learns of while resuming as
		// MODIFIED (queryapi/watch.go); either way the new row arrives.
		await("member2/late", func(f []string) bool {
			return len(f) > 2 && (f[0] == "ADDED" || f[0] == "MODIFIED") && f[1] == "member2" && f[2] == "late"
		})
		db, err := c1.CoreV1().Pods("shop").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		db.Labels["tier"] = "data"
		must(c1.CoreV1().Pods("shop").Update(ctx, db, metav1.UpdateOptions{}))
		await("MODIFIED member1/db", func(f []string) bool { return len(f) > 2 && f[0] == "MODIFIED" && f[1] == "member1" && f[2] == "db" })
		// A bound pod waits for its (absent) kubelet unless forced.
		if err := c2.CoreV1().Pods("shop").Delete(ctx, "late", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		await("DELETED member2/late", func(f []string) bool { return len(f) > 2 && f[0] == "DELETED" && f[1] == "member2" && f[2] == "late" })
	})
	t.Run("a dynamic informer on the per-cluster view stays equal to the member", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(&rest.Config{Host: fv.REST + "/clusters/member1"})
		if err != nil {
			t.Fatal(err)
		}
		podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "shop", nil)
		inf := f.ForResource(podsGVR).Informer()
		stop := make(chan struct{})
		defer f.Shutdown()
		defer close(stop)
		f.Start(stop)
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		// What the informer holds and what member1 holds: name and labels.
		state := func() (informer, member string, err error) {
			var a []string
			for _, o := range inf.GetStore().List() {
				u := o.(*unstructured.Unstructured)
				if u.GetAnnotations()["fleetview.io/cluster"] != "member1" {
					return "", "", fmt.Errorf("object %s from %q in member1's view", u.GetName(), u.GetAnnotations()["fleetview.io/cluster"])
				}
				a = append(a, fmt.Sprintf("%s/%s%v", u.GetNamespace(), u.GetName(), u.GetLabels()))
			}
			l, err := c1.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
			if err != nil {
				return "", "", err
			}
			var b []string
			for _, p := range l.Items {
				b = append(b, fmt.Sprintf("%s/%s%v", p.Namespace, p.Name, p.Labels))
			}
			slices.Sort(a)
			slices.Sort(b)
			return strings.Join(a, " "), strings.Join(b, " "), nil
		}
		equal := func() error {
			a, b, err := state()
			if err != nil {
				return err
			}
			if a != b {
				return fmt.Errorf("informer %s\nmember1  %s", a, b)
			}
			return nil
		}
		fixture.Eventually(t, 30*time.Second, equal)
		for i := range 5 {
			must(c1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", fmt.Sprintf("inf-%d", i), "inf", ""), metav1.CreateOptions{}))
		}
		for i := range 2 {
			p, err := c1.CoreV1().Pods("shop").Get(ctx, fmt.Sprintf("inf-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Labels["gen"] = "2"
			must(c1.CoreV1().Pods("shop").Update(ctx, p, metav1.UpdateOptions{}))
		}
		if err := c1.CoreV1().Pods("shop").Delete(ctx, "inf-4", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 30*time.Second, equal)
		if a, _, _ := state(); !strings.Contains(a, "inf-0map[app:inf gen:2]") || strings.Contains(a, "inf-4") {
			t.Fatalf("informer state %s", a)
		}
	})
	t.Run("a typed SharedInformerFactory follows member2", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: fv.REST + "/clusters/member2"})
		if err != nil {
			t.Fatal(err)
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("shop"))
		lister := f.Core().V1().Pods().Lister()
		stop := make(chan struct{})
		defer f.Shutdown()
		defer close(stop)
		f.Start(stop)
		for typ, ok := range f.WaitForCacheSync(stop) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		names := func() (string, error) {
			ps, err := lister.List(k8slabels.Everything())
			if err != nil {
				return "", err
			}
			var out []string
			for _, p := range ps {
				if p.Annotations["fleetview.io/cluster"] != "member2" {
					return "", fmt.Errorf("pod %s from %q", p.Name, p.Annotations["fleetview.io/cluster"])
				}
				out = append(out, p.Name+"/"+p.Spec.NodeName)
			}
			slices.Sort(out)
			return strings.Join(out, " "), nil
		}
		want := func(w string) func() error {
			return func() error {
				got, err := names()
				if err != nil {
					return err
				}
				if got != w {
					return fmt.Errorf("informer %q, want %q", got, w)
				}
				return nil
			}
		}
		fixture.Eventually(t, 30*time.Second, want("api/node-a web/node-b"))
		must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "typed", "typed", "node-t"), metav1.CreateOptions{}))
		fixture.Eventually(t, 30*time.Second, want("api/node-a typed/node-t web/node-b"))
		if err := c2.CoreV1().Pods("shop").Delete(ctx, "typed", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 30*time.Second, want("api/node-a web/node-b"))
	})
	t.Run("a watch-list reflector syncs without a list call", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(&rest.Config{Host: fv.REST + "/clusters/member2"})
		if err != nil {
			t.Fatal(err)
		}
		ri := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("shop")
		var mu sync.Mutex
		var lists, watches []string
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				mu.Lock()
				lists = append(lists, o.ResourceVersion)
				mu.Unlock()
				return ri.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				mu.Lock()
				watches = append(watches, fmt.Sprintf("sendInitialEvents=%v", o.SendInitialEvents != nil && *o.SendInitialEvents))
				mu.Unlock()
				return ri.Watch(ctx, o)
			},
		}
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		r := cache.NewReflector(lw, &unstructured.Unstructured{}, store, 0)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.RunWithContext(rctx) }()
		defer func() { cancel(); <-done }()
		fixture.Eventually(t, 30*time.Second, func() error {
			var got []string
			for _, o := range store.List() {
				got = append(got, o.(*unstructured.Unstructured).GetName())
			}
			slices.Sort(got)
			if want := []string{"api", "web"}; !slices.Equal(got, want) {
				return fmt.Errorf("store %v, want %v", got, want)
			}
			return nil
		})
		mu.Lock()
		defer mu.Unlock()
		if len(lists) != 0 || len(watches) == 0 || watches[0] != "sendInitialEvents=true" {
			t.Fatalf("lists %v watches %v: want a streaming list only", lists, watches)
		}
	})
	t.Run("Status responses", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			code         int
			reason       string
			mentions     string
		}{
			{"GET", "/api/v1/widgets", 404, "NotFound", "widgets"},
			{"GET", "/apis/example.io/v1/things", 404, "NotFound", "things"},
			{"GET", "/api/v1/namespaces/shop/pods/nope", 404, "NotFound", "nope"},
			{"GET", "/api/v1/namespaces/shop/pods/web", 409, "Conflict", "member1"},
			{"GET", "/api/v1/pods?labelSelector=app%20in%20(", 400, "BadRequest", "labelSelector"},
			{"GET", "/api/v1/pods?fieldSelector=spec..bogus%3Dx", 400, "BadRequest", "spec..bogus"},
			{"GET", "/api/v1/pods?fieldSelector=spec.priority%3E1", 400, "BadRequest", "operator >"},
			{"GET", "/api/v1/pods?limit=many", 400, "BadRequest", "limit"},
			{"GET", "/api/v1/pods?resourceVersion=garbage", 400, "BadRequest", "resourceVersion"},
			{"GET", "/api/v1/pods?limit=1&continue=garbage", 400, "BadRequest", "continue"},
			{"GET", "/api/v1/pods?watch=true&resourceVersion=garbage", 400, "BadRequest", "resourceVersion"},
			{"GET", "/api/v1/pods?watch=true&sendInitialEvents=true", 400, "BadRequest", "resourceVersionMatch"},
			{"GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=0", 400, "BadRequest", "resourceVersionMatch"},
			{"GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=1", 400, "BadRequest", "resourceVersion"},
			{"DELETE", "/api/v1/namespaces/shop/pods/db", 405, "MethodNotAllowed", "read-only"},
			{"POST", "/api/v1/namespaces/shop/pods", 405, "MethodNotAllowed", "read-only"},
			{"PATCH", "/apis/apps/v1/namespaces/shop/deployments/cart", 405, "MethodNotAllowed", "read-only"},
			{"GET", "/clusters/nosuch/api/v1/pods", 404, "NotFound", "nosuch"},
		} {
			req, err := http.NewRequest(tc.method, fv.REST+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var st metav1.Status
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("%s %s: %v: %s", tc.method, tc.path, err, b)
			}
			if resp.StatusCode != tc.code || st.Kind != "Status" || int(st.Code) != tc.code || string(st.Reason) != tc.reason || !strings.Contains(st.Message, tc.mentions) {
				t.Errorf("%s %s: %d %s, want %d %s mentioning %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.reason, tc.mentions)
			}
		}
	})
}
