package kubectlfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const tokens = `admin-token,admin,1,"fleet-admins"
bob-token,bob,2
`

// bob reads the shop namespace only.
const policy = `rules:
- groups: [fleet-admins]
  verbs: ["*", registry-admin]
  resources: ["*", registries]
- users: [bob]
  verbs: [get, list, watch, search]
  resources: ["*"]
  namespaces: [shop]
`

// memberChange is one change as the member's own API answered it.
type memberChange struct {
	cluster, namespace, name, typ, rv, manager string
}

// lastManager is the field manager of an object as the member returned
// it: the managedFields entry with the latest time, a later entry winning
// a tie (all of this test's writes are Updates).
func lastManager(o metav1.Object) string {
	best, bestT := "", time.Time{}
	for _, f := range o.GetManagedFields() {
		if f.Time != nil && !f.Time.Time.Before(bestT) {
			best, bestT = f.Manager, f.Time.Time
		}
	}
	return best
}

// kubectlFleet runs `kubectl fleet args...` with the plugin on PATH and
// the kubeconfig in KUBECONFIG, as a user types it.
func kubectlFleet(t *testing.T, pluginDir, kubeconfig string) func(args ...string) (string, string, error) {
	return func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, fixture.KubectlBin, append([]string{"fleet"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
		var out, errw strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errw
		err := cmd.Run()
		return out.String(), errw.String(), err
	}
}

// TestKubectlFleet: the plugin's four commands against the members' own
// changes.
func TestKubectlFleet(t *testing.T) {
	if _, err := os.Stat(fixture.KubectlBin); err != nil {
		t.Fatalf("kubectl is required (scripts/test.sh installs Debian's): %v", err)
	}
	ctx := context.Background()
	pluginDir := fixture.BuildKubectlFleet(t)
	fleet := fixture.StartFleet(t, "member1", "member2")
	dir := t.TempDir()
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	pool, _ := fixture.AuthHub{Tokens: tokens, Policy: policy,
		Files: map[string]string{"admin.token": "admin-token\n", "bob.token": "bob-token\n"}}.Configure(t, &o, dir)
	enableHistory(&o)
	fv, _ := fixture.StartTLS(t, o, pool)
	defer fv.Stop(t)
	admin := fixture.Bearer("admin-token").Ctx()
	if _, err := fv.Registries.ApplyRegistry(admin, fixture.RegistryRequest(t, "configmaps", "v1:ConfigMap", "v1:Namespace")); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig users get: `fleetview kubeconfig` with the hub's CA
	// and a token file.
	kubeconfig := func(tokenFile string) string {
		kc := filepath.Join(dir, filepath.Base(tokenFile)+".kubeconfig")
		if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: "https://" + o.HTTPAddr, TokenFile: tokenFile, CAFile: filepath.Join(dir, "ca.crt"), Output: kc}, io.Discard); err != nil {
			t.Fatalf("fleetview kubeconfig: %v", err)
		}
		return kc
	}
	fleetctl := kubectlFleet(t, pluginDir, kubeconfig(filepath.Join(dir, "admin.token")))
	bobctl := kubectlFleet(t, pluginDir, kubeconfig(filepath.Join(dir, "bob.token")))
	fixture.Eventually(t, 90*time.Second, func() error {
		cl, err := fv.Clusters.ListClusters(admin, &fleetviewv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		for _, c := range cl.GetClusters() {
			if !c.GetCacheSynced() || len(c.GetResources()) != 2 {
				return fmt.Errorf("%s not synced: %v", c.GetName(), c)
			}
		}
		if len(cl.GetClusters()) != 2 {
			return fmt.Errorf("%d clusters", len(cl.GetClusters()))
		}
		return nil
	})

	// The members' changes, each as the member answered it.
	var changes []memberChange
	record := func(cluster, typ string, cm *corev1.ConfigMap) {
		changes = append(changes, memberChange{cluster, cm.Namespace, cm.Name, typ, cm.ResourceVersion, lastManager(cm)})
	}
	must := func(cm *corev1.ConfigMap, err error) *corev1.ConfigMap {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	for _, c := range []string{"member1", "member2"} {
		for _, ns := range []string{"shop", "payments"} {
			if _, err := fleet.Cluster(c).Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// member1/shop/settings: created, its data changed twice by another
	// manager, then a label added.
	m1 := fleet.Cluster("member1").Clientset().CoreV1().ConfigMaps("shop")
	settings := must(m1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"color": "v1"}}, metav1.CreateOptions{FieldManager: "creator"}))
	record("member1", "ADDED", settings)
	for _, v := range []string{"v2", "v3"} {
		settings.Data["color"] = v
		settings = must(m1.Update(ctx, settings, metav1.UpdateOptions{FieldManager: "editor"}))
		record("member1", "MODIFIED", settings)
	}
	settings.Labels["release"] = "blue"
	settings = must(m1.Update(ctx, settings, metav1.UpdateOptions{FieldManager: "labeler"}))
	record("member1", "MODIFIED", settings)
	// member1/shop/old: deleted; its last state holds its data.
	old := must(m1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Data: map[string]string{"payload": "keep-me"}}, metav1.CreateOptions{FieldManager: "creator"}))
	record("member1", "ADDED", old)
	// The delete's resourceVersion is the member's DELETED event's.
	w, err := m1.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=old", ResourceVersion: old.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			record("member1", "DELETED", ev.Object.(*corev1.ConfigMap))
			break
		}
	}
	w.Stop()
	// member2/payments/ledger: bob may not see it.
	m2 := fleet.Cluster("member2").Clientset().CoreV1().ConfigMaps("payments")
	ledger := must(m2.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{FieldManager: "creator"}))
	record("member2", "ADDED", ledger)
	ledger.Data["k"] = "2"
	ledger = must(m2.Update(ctx, ledger, metav1.UpdateOptions{FieldManager: "editor"}))
	record("member2", "MODIFIED", ledger)

	// Wait for the hub to have recorded the last change of each cluster.
	fixture.Eventually(t, 60*time.Second, func() error {
		out, stderr, err := fleetctl("changes", "--resource", "cm", "-o", "json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		var got struct {
			Changes []struct{ Cluster, Name, ResourceVersion, Type string }
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		n := 0
		for _, c := range got.Changes {
			if (c.Cluster == "member1" && c.Name == "old" && c.Type == "DELETED") || (c.Cluster == "member2" && c.ResourceVersion == ledger.ResourceVersion) {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("the hub has not recorded every change yet:\n%s", out)
		}
		return nil
	})

	// rowsOf reads a kubectl-style table into maps by column.
	rowsOf := func(t *testing.T, out string) []map[string]string {
		t.Helper()
		table := fixture.TableRows(out)
		if len(table) == 0 {
			t.Fatalf("no table:\n%s", out)
		}
		var rows []map[string]string
		for _, r := range table[1:] {
			m := map[string]string{}
			for i, h := range table[0] {
				if i < len(r) {
					m[h] = r[i]
				}
			}
			rows = append(rows, m)
		}
		return rows
	}
	run := func(t *testing.T, ctl func(...string) (string, string, error), args ...string) string {
		t.Helper()
		out, stderr, err := ctl(args...)
		if err != nil {
			t.Fatalf("kubectl fleet %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}

	t.Run("history is the member's sequence", func(t *testing.T) {
		out := run(t, fleetctl, "history", "cm", "settings", "-n", "shop", "--cluster", "member1")
		rows := rowsOf(t, out)
		var want []memberChange
		for _, c := range changes {
			if c.cluster == "member1" && c.name == "settings" {
				want = append(want, c)
			}
		}
		if len(rows) != len(want) {
			t.Fatalf("%d revisions, the member made %d changes:\n%s", len(rows), len(want), out)
		}
		for i, r := range rows {
			w := want[i]
			if r["REVISION"] != fmt.Sprint(i+1) || r["CLUSTER"] != "member1" || r["TYPE"] != w.typ || r["RESOURCEVERSION"] != w.rv || r["MANAGER"] != w.manager || r["OPERATION"] != "Update" {
				t.Errorf("revision %d: %v, want %+v", i+1, r, w)
			}
		}
		// What changed: the data twice, then the label.
		for i, want := range []string{"created", "data.color", "data.color", "metadata.labels.release"} {
			if !strings.HasPrefix(rows[i]["CHANGE"], want) {
				t.Errorf("revision %d changed %q, want %q\n%s", i+1, rows[i]["CHANGE"], want, out)
			}
		}
	})

	t.Run("without --cluster", func(t *testing.T) {
		// In one cluster: found there.
		if rows := rowsOf(t, run(t, fleetctl, "history", "cm", "settings", "-n", "shop")); len(rows) != 4 || rows[0]["CLUSTER"] != "member1" {
			t.Errorf("settings without --cluster: %v", rows)
		}
		// kube-apiserver's own ConfigMap is in both members: history shows
		// each cluster's revisions, numbered on their own; diff asks for
		// one.
		tracking := []string{"cm", "kube-apiserver-legacy-service-account-token-tracking", "-n", "kube-system"}
		rows := rowsOf(t, run(t, fleetctl, append([]string{"history"}, tracking...)...))
		var got []string
		for _, r := range rows {
			got = append(got, r["CLUSTER"]+" "+r["REVISION"]+" "+r["TYPE"])
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"member1 1 ADDED", "member2 1 ADDED"}) {
			t.Errorf("an object in two clusters: history %v", got)
		}
		_, stderr, err := fleetctl(append([]string{"diff"}, tracking...)...)
		for _, w := range []string{"member1", "member2", "--cluster"} {
			if err == nil || !strings.Contains(stderr, w) {
				t.Errorf("diff of an object in two clusters: %v %q, want it to name %s", err, stderr, w)
			}
		}
	})

	t.Run("diff", func(t *testing.T) {
		for _, tc := range []struct {
			args       []string
			plus, less []string
		}{
			{[]string{}, []string{"+    release: blue", "+  resourceVersion: \"" + settings.ResourceVersion + "\""}, nil},
			{[]string{"--revision", "2"}, []string{"+  color: v2"}, []string{"-  color: v1"}},
			{[]string{"--since", "1h"}, []string{"+  color: v3", "+    release: blue"}, nil},
		} {
			out := run(t, fleetctl, append([]string{"diff", "configmaps", "settings", "-n", "shop", "--cluster", "member1"}, tc.args...)...)
			lines := strings.Split(out, "\n")
			if !strings.HasPrefix(out, "--- ") || !strings.Contains(out, "\n+++ ") || !strings.Contains(out, "\n@@ ") {
				t.Errorf("diff %v is no unified diff:\n%s", tc.args, out)
			}
			for _, w := range append(tc.plus, tc.less...) {
				if !slices.Contains(lines, w) {
					t.Errorf("diff %v lacks the line %q:\n%s", tc.args, w, out)
				}
			}
		}
	})

	t.Run("deleted with the last state", func(t *testing.T) {
		rows := rowsOf(t, run(t, fleetctl, "deleted", "cm", "-n", "shop"))
		if len(rows) != 1 || rows[0]["CLUSTER"] != "member1" || rows[0]["NAME"] != "old" || rows[0]["RESOURCE"] != "configmaps" {
			t.Fatalf("deleted: %v", rows)
		}
		var list struct {
			Kind  string
			Items []corev1.ConfigMap
		}
		out := run(t, fleetctl, "deleted", "configmaps", "-n", "shop", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Name != "old" || list.Items[0].Data["payload"] != "keep-me" {
			t.Errorf("deleted -o json: %s", out)
		}
	})

	t.Run("changes, paged and filtered", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			keep func(memberChange) bool
		}{
			{"every change, two a page", []string{"--chunk-size", "2"}, func(memberChange) bool { return true }},
			{"one cluster", []string{"--cluster", "member2"}, func(c memberChange) bool { return c.cluster == "member2" }},
			{"one namespace and type", []string{"-n", "shop", "--type", "DELETED"}, func(c memberChange) bool { return c.namespace == "shop" && c.typ == "DELETED" }},
			{"a label", []string{"-l", "release=blue"}, func(c memberChange) bool {
				return c.name == "settings" && c.typ == "MODIFIED" && c.rv == settings.ResourceVersion
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rows := rowsOf(t, run(t, fleetctl, append([]string{"changes", "--resource", "configmaps", "--since", "1h"}, tc.args...)...))
				var got, want []string
				for _, r := range rows {
					if r["NAMESPACE"] == "kube-system" {
						continue // the members' own (kube-apiserver's), not this test's
					}
					got = append(got, strings.Join([]string{r["CLUSTER"], r["NAMESPACE"], r["NAME"], r["TYPE"], r["RESOURCEVERSION"]}, " "))
				}
				for _, c := range changes {
					if tc.keep(c) {
						want = append(want, strings.Join([]string{c.cluster, c.namespace, c.name, c.typ, c.rv}, " "))
					}
				}
				// The feed is oldest first; clusters interleave by time.
				slices.Sort(got)
				slices.Sort(want)
				if err := fixture.SameSet(got, want); err != nil {
					t.Error(err)
				}
			})
		}
	})

	t.Run("a member context", func(t *testing.T) {
		// The kubeconfig's member2 context: --cluster defaults to it.
		kc := kubeconfig(filepath.Join(dir, "admin.token"))
		out, stderr, err := kubectlFleet(t, pluginDir, kc)("changes", "--resource", "cm", "--context", "member2")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		for _, r := range rowsOf(t, out) {
			if r["CLUSTER"] != "member2" {
				t.Errorf("member2's context shows %v", r)
			}
		}
	})

	t.Run("a restricted user sees only what they may read", func(t *testing.T) {
		out := run(t, bobctl, "changes", "--resource", "cm")
		for _, r := range rowsOf(t, out) {
			if r["NAMESPACE"] != "shop" {
				t.Errorf("bob sees %v", r)
			}
		}
		if strings.Contains(out, "ledger") {
			t.Errorf("bob sees the ledger:\n%s", out)
		}
		// The ledger's history: admin's two revisions, none of bob's.
		ledgerHistory := []string{"history", "cm", "ledger", "-n", "payments", "--cluster", "member2"}
		if rows := rowsOf(t, run(t, fleetctl, ledgerHistory...)); len(rows) != 2 {
			t.Errorf("admin: the ledger's history %v, want 2 revisions", rows)
		}
		if out, stderr, err := bobctl(ledgerHistory...); strings.TrimSpace(out) != "" {
			t.Errorf("bob reads the ledger's history: %v\n%s%s", err, out, stderr)
		}
		if out, _, _ := bobctl("deleted", "-o", "yaml"); strings.Contains(out, "ledger") {
			t.Errorf("bob's deleted: %s", out)
		}
	})

	t.Run("errors name the flag", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"changes", "--since", "yesterday"}, `--since "yesterday"`},
			{[]string{"history", "gizmos", "x"}, `resource "gizmos"`},
			{[]string{"changes", "--type", "CREATED"}, `--type "CREATED"`},
			{[]string{"changes", "--context", "nowhere"}, "--context nowhere"},
		} {
			_, stderr, err := fleetctl(tc.args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("kubectl fleet %v: %v, stderr %q, want it to name %s", tc.args, err, stderr, tc.want)
			}
		}
	})
}

// enableHistory turns the hub's history on with a window longer than the
// test.
func enableHistory(o *app.UpOptions) {
	o.History = app.HistoryOptions{Enabled: true, Retention: time.Hour, MaxBytes: 256 << 20}
}
