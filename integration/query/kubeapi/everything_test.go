package kubeapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// crd is a namespaced custom resource for installCRD: served at versions,
// the last one stored.
type crd struct {
	group, kind, plural string
	versions            []string
}

func (c crd) gvr(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: c.group, Version: version, Resource: c.plural}
}

// installCRD installs c in cl and, once it is served, creates one object
// of it, name, in namespace shop (none when name is empty).
func installCRD(t *testing.T, ctx context.Context, cl *harness.Cluster, c crd, name string) {
	t.Helper()
	var versions []any
	for i, v := range c.versions {
		versions = append(versions, map[string]any{"name": v, "served": true, "storage": i == len(c.versions)-1,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
	}
	doc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": c.plural + "." + c.group},
		"spec": map[string]any{"group": c.group, "scope": "Namespaced", "versions": versions,
			"names": map[string]any{"plural": c.plural, "singular": strings.ToLower(c.kind), "kind": c.kind, "listKind": c.kind + "List"}},
	}}
	if _, err := cl.Dynamic().Resource(fixture.CRDGVR).Create(ctx, doc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	last := c.versions[len(c.versions)-1]
	fixture.Eventually(t, 60*time.Second, func() error { // until the CRD is established
		if name == "" {
			_, err := cl.Dynamic().Resource(c.gvr(last)).Namespace("shop").List(ctx, metav1.ListOptions{})
			return err
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": c.group + "/" + last, "kind": c.kind,
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{"size": 3}}}
		_, err := cl.Dynamic().Resource(c.gvr(last)).Namespace("shop").Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
}

// TestCacheEverything applies a registry selecting every kind (with an
// exclude) to three real members and drives kubectl against the hub: the
// built-in kinds and each member's CRDs are cached at the member's
// preferred version, Events and Leases are left out unless named, a CRD
// installed during the test is synced without a registry edit, and one
// removed leaves no object behind (re-installed empty, it lists nothing).
func TestCacheEverything(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2", "member3")
	fixture.CreateNS(t, ctx, fleet, "shop")
	must := fixture.MustOK(t)
	c1, c2, c3 := fleet.Cluster("member1"), fleet.Cluster("member2"), fleet.Cluster("member3")
	must(c1.Clientset().AppsV1().Deployments("shop").Create(ctx, fixture.Deployment("shop", "cart"), metav1.CreateOptions{}))
	must(c2.Clientset().CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}))
	must(c2.Clientset().CoreV1().Events("shop").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "boom"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}, Reason: "Test"}, metav1.CreateOptions{}))
	must(c3.Clientset().CoordinationV1().Leases("shop").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leader"}}, metav1.CreateOptions{}))
	crontabs := crd{group: "stable.example.com", kind: "CronTab", plural: "crontabs", versions: []string{"v1"}}
	crontabs2 := crd{group: "stable.example.com", kind: "CronTab", plural: "crontabs", versions: []string{"v1", "v2"}}
	widgets := crd{group: "example.org", kind: "Widget", plural: "widgets", versions: []string{"v1"}}
	gadgets := crd{group: "example.net", kind: "Gadget", plural: "gadgets", versions: []string{"v1"}}
	installCRD(t, ctx, c1, crontabs, "nightly")
	installCRD(t, ctx, c2, crontabs2, "hourly") // v2 preferred there
	installCRD(t, ctx, c3, widgets, "blue")

	fv := fixture.StartUp(t, fixture.UpOptions(t, fleet, t.TempDir()))
	defer fv.Stop(t)
	start := time.Now()
	fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
		"apiVersion": "fleetview.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "everything"},
		"spec": map[string]any{"targetCluster": map[string]any{},
			"resourceSelectors": []any{map[string]any{"apiVersion": "*", "kind": "*", "exclude": []any{map[string]any{"kind": "ConfigMap"}}}}},
	})
	t.Logf("every kind of 3 members synced %s after the registry was applied", time.Since(start).Round(time.Millisecond))

	// A fresh discovery cache for every call: kinds come and go here.
	kubectl := hubKubectl(t, ctx, fv.REST, true)
	rows := func(args ...string) ([]string, error) { return clusterRows(kubectl, args...) }
	wantRows := func(want []string, args ...string) func() error {
		return func() error {
			got, err := rows(args...)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("kubectl %s: rows %v, want %v", strings.Join(args, " "), got, want)
			}
			return nil
		}
	}

	t.Run("api-resources lists the union of every member's kinds, without what is left out", func(t *testing.T) {
		out, err := kubectl("api-resources", "--no-headers", "-o", "name")
		if err != nil {
			t.Fatalf("kubectl api-resources: %v\n%s", err, out)
		}
		names := strings.Fields(out)
		for _, want := range []string{"pods", "namespaces", "serviceaccounts", "deployments.apps", "clusterroles.rbac.authorization.k8s.io",
			"customresourcedefinitions.apiextensions.k8s.io", "crontabs.stable.example.com", "widgets.example.org"} {
			if !slices.Contains(names, want) {
				t.Errorf("api-resources lacks %s:\n%s", want, out)
			}
		}
		for _, not := range []string{"events", "events.events.k8s.io", "leases.coordination.k8s.io", "configmaps", "bindings", "tokenreviews.authentication.k8s.io"} {
			if slices.Contains(names, not) {
				t.Errorf("api-resources lists %s, which the wildcard leaves out:\n%s", not, out)
			}
		}
	})

	t.Run("kubectl gets built-in and custom kinds from every member", func(t *testing.T) {
		for _, c := range []struct {
			want []string
			args []string
		}{
			{[]string{"member1/shop/cart"}, []string{"get", "deployments", "-A"}},
			{[]string{"member3/shop/blue"}, []string{"get", "widgets", "-A"}},
			{[]string{"member1/shop/nightly"}, []string{"get", "crontabs.v1.stable.example.com", "-A"}},
			{[]string{"member2/shop/hourly"}, []string{"get", "crontabs.v2.stable.example.com", "-A"}},
		} {
			if err := wantRows(c.want, c.args...)(); err != nil {
				t.Error(err)
			}
		}
		if out, err := kubectl("get", "events", "-A"); err == nil || !strings.Contains(out, `doesn't have a resource type "events"`) {
			t.Errorf("kubectl get events -A through the hub: %v\n%s\nwant: no such resource (left out of wildcards)", err, out)
		}
	})

	t.Run("the registry's status says what each wildcard stood for on each member", func(t *testing.T) {
		// Each collector writes its conditions beside its record, not
		// before the hub's readiness: wait for them.
		fixture.Eventually(t, 30*time.Second, func() error {
			reg, err := fv.Registries.GetRegistry(ctx, &fleetviewv1.GetRegistryRequest{Name: "everything"})
			if err != nil {
				return err
			}
			conds := map[string]string{}
			for _, c := range reg.GetRegistry().GetFields()["status"].GetStructValue().GetFields()["conditions"].GetListValue().GetValues() {
				f := c.GetStructValue().GetFields()
				conds[f["type"].GetStringValue()] = f["message"].GetStringValue()
			}
			var errs []string
			for cluster, want := range map[string]string{
				"member1": "crontabs.stable.example.com/v1",
				"member2": "crontabs.stable.example.com/v2",
				"member3": "widgets.example.org/v1",
			} {
				if !strings.Contains(conds[cluster+"/Matched"], want) {
					errs = append(errs, fmt.Sprintf("%s/Matched = %q, want it to name %s", cluster, conds[cluster+"/Matched"], want))
				}
				msg := conds[cluster+"/Wildcards"]
				for _, w := range []string{"selector 0 (* *):", "kinds", "ConfigMap v1: excluded by the selector", "Event v1: left out of wildcards unless named",
					"Lease coordination.k8s.io/v1: left out of wildcards unless named", "cannot be listed and watched"} {
					if !strings.Contains(msg, w) {
						errs = append(errs, fmt.Sprintf("%s/Wildcards = %q, want it to say %q", cluster, msg, w))
					}
				}
			}
			if len(errs) > 0 {
				return fmt.Errorf("%s", strings.Join(errs, "\n"))
			}
			return nil
		})
	})

	t.Run("search covers every cached kind", func(t *testing.T) {
		for text, want := range map[string]string{"blue": "member3 example.org/v1/widgets", "hourly": "member2 stable.example.com/v2/crontabs", "cart": "member1 apps/v1/deployments"} {
			resp, err := fv.Query.Search(ctx, &fleetviewv1.SearchRequest{Text: text, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range resp.GetItems() {
				g := h.GetGvr()
				got = append(got, h.GetCluster()+" "+strings.TrimPrefix(g.GetGroup()+"/", "/")+g.GetVersion()+"/"+g.GetResource())
			}
			if !slices.Contains(got, want) {
				t.Errorf("search %q: hits %v, want %s among them", text, got, want)
			}
		}
	})

	t.Run("a CRD installed in a member is synced without a registry edit", func(t *testing.T) {
		installed := time.Now()
		installCRD(t, ctx, c2, gadgets, "red")
		fixture.Eventually(t, 60*time.Second, wantRows([]string{"member2/shop/red"}, "get", "gadgets", "-A"))
		t.Logf("a CRD installed in member2: its object listed through the hub %s after the CRD was created", time.Since(installed).Round(time.Millisecond))
	})

	t.Run("a CRD removed from a member leaves no object behind", func(t *testing.T) {
		if err := c3.Dynamic().Resource(fixture.CRDGVR).Delete(ctx, widgets.plural+"."+widgets.group, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 60*time.Second, func() error {
			out, err := kubectl("get", "widgets", "-A")
			if err == nil || !strings.Contains(out, `doesn't have a resource type "widgets"`) {
				return fmt.Errorf("kubectl get widgets -A after the CRD's removal: %v\n%s", err, out)
			}
			return nil
		})
		// Installed again, empty: a ghost of blue would be listed now.
		installCRD(t, ctx, c3, widgets, "")
		fixture.Eventually(t, 60*time.Second, func() error {
			out, err := kubectl("get", "widgets", "-A")
			if err != nil || !strings.Contains(out, "No resources found") {
				return fmt.Errorf("kubectl get widgets -A after the CRD came back empty: %v\n%s", err, out)
			}
			return nil
		})
	})
}
