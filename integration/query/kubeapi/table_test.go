package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

var gadgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

// installGadgets installs a CRD with printer columns (one of priority 1,
// shown by -o wide only) and one Gadget.
func installGadgets(t *testing.T, ctx context.Context, c *harness.Cluster, size int64, phase string) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.example.com"},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				"additionalPrinterColumns": []any{
					map[string]any{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
					map[string]any{"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
					map[string]any{"name": "Owner", "type": "string", "jsonPath": ".spec.owner", "priority": int64(1)},
					map[string]any{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
				}}}},
	}}
	if _, err := c.Dynamic().Resource(fixture.CRDGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "namespace": tableNS},
		"spec":     map[string]any{"size": size, "owner": "team-" + phase}, "status": map[string]any{"phase": phase}}}
	fixture.Eventually(t, 60*time.Second, func() error { // until the CRD is established
		_, err := c.Dynamic().Resource(gadgetsGVR).Namespace(tableNS).Create(ctx, g, metav1.CreateOptions{})
		return err
	})
}

// TestTableAsTheMemberPrints: what Debian's kubectl prints for a kind
// through fleetview is what it prints against the member (plus the CLUSTER
// column), for built-in kinds, a CRD with printer columns, a CRD without
// (the member's default Name and Age), with and without -o wide; and the
// Table's cells are the member's own.
// Both against the hub in process and as the built binary (fixture.Hubs).
// tableNS holds TestTableAsTheMemberPrints's objects on the shared
// members: each kind is printed for this namespace only.
const tableNS = "tables"

func TestTableAsTheMemberPrints(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := members.Get(t) // with the CronTab CRD
	fixture.CreateNS(t, ctx, fleet, tableNS)
	must := fixture.MustOK(t)
	for i, c := range fleet.Clusters() {
		cs := c.Clientset()
		must(cs.CoreV1().Pods(tableNS).Create(ctx, fixture.QPod(tableNS, "web", "web", fmt.Sprintf("node-%d", i)), metav1.CreateOptions{}))
		must(cs.AppsV1().Deployments(tableNS).Create(ctx, fixture.Deployment(tableNS, "cart"), metav1.CreateOptions{}))
		must(cs.CoreV1().ConfigMaps(tableNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: tableNS},
			Data: map[string]string{"a": "1", "b": strings.Repeat("x", i+1)}}, metav1.CreateOptions{}))
		must(cs.CoreV1().Services(tableNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: tableNS},
			Spec: corev1.ServiceSpec{Selector: fixture.Labels("web"), Ports: []corev1.ServicePort{{Port: 80 + int32(i)}}}}, metav1.CreateOptions{}))
		installGadgets(t, ctx, c, int64(3+i), []string{"Ready", "Pending"}[i%2])
		ct := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab",
			"metadata": map[string]any{"name": "nightly", "namespace": tableNS}, "spec": map[string]any{"cronSpec": "* * * * */5"}}}
		must(c.Dynamic().Resource(fixture.CronTabsGVR).Namespace(tableNS).Create(ctx, ct, metav1.CreateOptions{}))
	}

	for _, hub := range fixture.Hubs() {
		t.Run(hub.Name(), func(t *testing.T) {
			fv := fixture.Start(t, hub, fixture.UpOptions(t, fleet, t.TempDir()))
			defer fv.Stop(t)
			fixture.ApplyAndWaitSynced(t, ctx, fv, map[string]any{
				"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "tables"},
				"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2"}},
					"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"},
						map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}, map[string]any{"apiVersion": "v1", "kind": "Service"},
						map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget"}, map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab"}}},
			})
			dir := t.TempDir()
			fvConfig, memberConfig := filepath.Join(dir, "fleetview"), filepath.Join(dir, "members")
			if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: fv.REST, Output: fvConfig}, io.Discard); err != nil {
				t.Fatalf("fleetview kubeconfig: %v", err)
			}
			if err := fleet.WriteKubeconfig(memberConfig, "admin"); err != nil {
				t.Fatal(err)
			}
			kubectl := func(t *testing.T, kc string, args ...string) string {
				t.Helper()
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--cache-dir", filepath.Join(dir, "cache-"+filepath.Base(kc))}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}

			for _, kind := range []string{"pods", "deployments", "configmaps", "services", "gadgets", "crontabs"} {
				for _, wide := range []bool{false, true} {
					name := kind
					args := []string{"get", kind, "-n", tableNS}
					if wide {
						name, args = kind+" -o wide", append(args, "-o", "wide")
					}
					t.Run(name, func(t *testing.T) {
						for _, member := range []string{"member1", "member2"} {
							want := fixture.TableRows(kubectl(t, memberConfig, append([]string{"--context", member}, args...)...))
							got := fixture.TableRows(kubectl(t, fvConfig, args...))
							if len(want) < 2 || len(got) < 2 {
								t.Fatalf("%s: member printed %v, fleetview %v", member, want, got)
							}
							if got[0][0] != "CLUSTER" || !slices.Equal(got[0][1:], want[0]) {
								t.Fatalf("%s: header %v, want CLUSTER then the member's %v", member, got[0], want[0])
							}
							// AGE is computed when each answer is made: it may
							// differ by the second between the two.
							age := slices.Index(want[0], "AGE")
							var mine [][]string
							for _, r := range got[1:] {
								if r[0] == member {
									mine = append(mine, dropField(r[1:], age))
								}
							}
							var theirs [][]string
							for _, r := range want[1:] {
								theirs = append(theirs, dropField(r, age))
							}
							if !slices.EqualFunc(mine, theirs, slices.Equal) {
								t.Fatalf("%s: rows through fleetview %v, against the member %v", member, mine, theirs)
							}
						}
					})
				}
			}

			// kubectl's other habits: each prints through fleetview what it
			// prints against the members, every member's rows together.
			for _, args := range [][]string{
				{"get", "deployments", "-n", tableNS, "--sort-by=.metadata.name"},
				{"get", "configmaps", "-n", tableNS, "--chunk-size=0"},
				{"get", "gadgets", "-n", tableNS, "--server-print=false"},
				{"get", "pods", "-n", tableNS, "-o", "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName"},
			} {
				t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
					got := fixture.TableRows(kubectl(t, fvConfig, args...))
					var want [][]string
					for _, member := range []string{"member1", "member2"} {
						rows := fixture.TableRows(kubectl(t, memberConfig, append([]string{"--context", member}, args...)...))
						if len(want) == 0 {
							want = rows[:1]
						}
						want = append(want, rows[1:]...)
					}
					header := got[0]
					if header[0] == "CLUSTER" {
						header = header[1:]
					}
					if !slices.Equal(header, want[0]) {
						t.Fatalf("header %v, want the members' %v", got[0], want[0])
					}
					age := slices.Index(want[0], "AGE")
					key := func(rows [][]string, cluster bool) []string {
						var out []string
						for _, r := range rows[1:] {
							if cluster && got[0][0] == "CLUSTER" {
								r = r[1:]
							}
							out = append(out, strings.Join(dropField(r, age), " "))
						}
						slices.Sort(out)
						return out
					}
					if g, w := key(got, true), key(want, false); !slices.Equal(g, w) {
						t.Fatalf("rows through fleetview %q, against the members %q", g, w)
					}
				})
			}

			t.Run("the Table's cells are the member's", func(t *testing.T) {
				get := func(hc *http.Client, url string) metav1.Table {
					req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
					req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
					resp, err := hc.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					var tbl metav1.Table
					if err := json.NewDecoder(resp.Body).Decode(&tbl); err != nil || resp.StatusCode != 200 {
						t.Fatalf("%s: %d %v", url, resp.StatusCode, err)
					}
					return tbl
				}
				c := fleet.Cluster("member2")
				hc, err := rest.HTTPClientFor(c.AdminRESTConfig())
				if err != nil {
					t.Fatal(err)
				}
				member := get(hc, c.URL+"/apis/example.com/v1/namespaces/"+tableNS+"/gadgets")
				ours := get(http.DefaultClient, fv.REST+"/clusters/member2/apis/example.com/v1/namespaces/"+tableNS+"/gadgets")
				if len(member.Rows) != 1 || len(ours.Rows) != 1 || len(ours.ColumnDefinitions) != len(member.ColumnDefinitions)+1 {
					t.Fatalf("member %+v, fleetview %+v", member, ours)
				}
				for i, d := range member.ColumnDefinitions {
					o := ours.ColumnDefinitions[i+1]
					if o.Name != d.Name || o.Type != d.Type || o.Format != d.Format || o.Priority != d.Priority {
						t.Fatalf("column %d: %+v, member's %+v", i, o, d)
					}
				}
				// Age (a date column of the CRD) is computed when each answer is
				// made, from the same creationTimestamp.
				age := slices.IndexFunc(member.ColumnDefinitions, func(d metav1.TableColumnDefinition) bool { return d.Name == "Age" })
				mc, oc := slices.Clone(member.Rows[0].Cells), slices.Clone(ours.Rows[0].Cells[1:])
				if age < 0 || len(mc) != len(oc) {
					t.Fatalf("columns %+v, cells %v and %v", member.ColumnDefinitions, mc, oc)
				}
				mc[age], oc[age] = nil, nil
				mb, _ := json.Marshal(mc)
				ob, _ := json.Marshal(oc)
				if ours.Rows[0].Cells[0] != "member2" || string(mb) != string(ob) {
					t.Fatalf("cells %s (cluster %v), member's %s", ob, ours.Rows[0].Cells[0], mb)
				}
			})
		})
	}
}

// dropField removes field i (-1: none).
func dropField(r []string, i int) []string {
	if i < 0 || i >= len(r) {
		return r
	}
	return slices.Delete(slices.Clone(r), i, i+1)
}
