package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsnames"
)

// TestForgedInventoryRecord: a hub with per-cluster NATS credentials and
// the real collector binaries of member1 and member2. Playing member1's
// collector with member1's own credential, the test writes member1's
// inventory record claiming that pods are cluster-scoped, of kind Secret,
// with the short names po, svc and deploy, ready but never synced. The
// resource catalog does not believe it: member2's pods still list and get
// through the Kubernetes API and kubectl, discovery and short names are
// the built-ins', /readyz stays 200; only member1 is marked, in
// /readyz/clusters and /v1/clusters.
func TestForgedInventoryRecord(t *testing.T) {
	fixture.RequireKubectl(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	pass := map[string]string{"member1": "member1-secret-0123456789", "member2": "member2-secret-0123456789"}
	usersFile := filepath.Join(dir, "nats-users")
	if err := os.WriteFile(usersFile, []byte("member1:"+pass["member1"]+"\nmember2:"+pass["member2"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, natsPort := fixture.FreePort(t)
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t)},
		NATSHost: "127.0.0.1", NATSPort: natsPort, NATSUsersFile: usersFile}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)
	url := "nats://" + natsAddr
	kc := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	collectors := map[string]*exec.Cmd{}
	var logs bytes.Buffer
	for _, name := range []string{"member1", "member2"} {
		userFile := filepath.Join(dir, "nats-user-"+name)
		if err := os.WriteFile(userFile, []byte(name+":"+pass[name]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		col := exec.Command(bin, "collector", "--cluster", name, "--kubeconfig", kc, "--context", name,
			"--nats-url", url, "--nats-user-file", userFile, "--heartbeat", "2s")
		col.Stdout, col.Stderr = &logs, &logs
		if err := col.Start(); err != nil {
			t.Fatal(err)
		}
		collectors[name] = col
	}
	stop := func(name string) {
		if col := collectors[name]; col != nil {
			_ = col.Process.Signal(os.Interrupt)
			_ = col.Wait()
			delete(collectors, name)
		}
	}
	defer func() {
		stop("member1")
		stop("member2")
		if t.Failed() {
			t.Logf("collector logs:\n%s", logs.String())
		}
	}()
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"member1", "member2"} {
		if _, err := fleet.Cluster(name).Clientset().CoreV1().Pods("default").Create(ctx, fixture.Pod("default", "web", "web"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Both members listed and synced: /readyz/clusters judges the clusters
	// that have written a record, so before member2's first record a 200
	// speaks for member1 alone (a fast poll saw that once in CI).
	fixture.Eventually(t, 120*time.Second, func() error {
		code, body := fv.RESTStatus(t, "/readyz/clusters")
		if code != http.StatusOK {
			return fmt.Errorf("readyz/clusters %d %v", code, body["clusters"])
		}
		cs, _ := body["clusters"].([]any)
		synced := 0
		for _, c := range cs {
			if m, _ := c.(map[string]any); m["synced"] == true && (m["name"] == "member1" || m["name"] == "member2") {
				synced++
			}
		}
		if synced != 2 {
			return fmt.Errorf("readyz/clusters: %v, want member1 and member2 synced", cs)
		}
		return nil
	})

	// member1's collector stops (so its heartbeat does not repair the
	// record) and its credential writes the forged record.
	stop("member1")
	_, js := fixture.ClusterCredential(t, url, "member1", pass["member1"])
	inv, err := js.KeyValue(ctx, natsnames.ClusterBucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]any{"name": "member1", "ready": true, "heartbeat": time.Now().UTC(),
		"resources": []map[string]any{{"group": "", "version": "v1", "resource": "pods", "kind": "Secret",
			"namespaced": false, "shortNames": []string{"po", "svc", "deploy"}, "synced": false}}}
	b, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Put(ctx, "member1", b); err != nil {
		t.Fatalf("member1's credential may not write its own record: %v", err)
	}

	// The catalog follows the record by watch: member1 is marked.
	fixture.Eventually(t, 30*time.Second, func() error {
		var cl struct {
			Clusters []struct {
				Name        string `json:"name"`
				CacheSynced bool   `json:"cacheSynced"`
				Resources   []struct {
					Kind    string `json:"kind"`
					Message string `json:"message"`
				} `json:"resources"`
			} `json:"clusters"`
		}
		if _, err := fv.RESTGet("/v1/clusters", &cl); err != nil {
			return err
		}
		for _, c := range cl.Clusters {
			if c.Name != "member1" {
				continue
			}
			if c.CacheSynced || len(c.Resources) != 1 || c.Resources[0].Kind != "Secret" || !strings.HasPrefix(c.Resources[0].Message, "not followed: ") {
				return fmt.Errorf("member1 not marked in /v1/clusters: %+v", c)
			}
			t.Logf("/v1/clusters member1 pods: %s", c.Resources[0].Message)
			return nil
		}
		return fmt.Errorf("member1 missing from /v1/clusters: %+v", cl)
	})

	// Readiness: the hub serves; only member1 is not synced.
	if code, body := fv.RESTStatus(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after the forged record: %d %v", code, body)
	}
	var rc struct {
		Synced   bool `json:"synced"`
		Clusters []struct {
			Name   string `json:"name"`
			Synced bool   `json:"synced"`
			Reason string `json:"reason"`
		} `json:"clusters"`
	}
	code, raw := getRaw(t, fv.REST+"/readyz/clusters")
	if err := json.Unmarshal(raw, &rc); err != nil || code != http.StatusServiceUnavailable || rc.Synced {
		t.Fatalf("/readyz/clusters: %d %s (%v), want 503 synced false", code, raw, err)
	}
	for _, c := range rc.Clusters {
		switch c.Name {
		case "member1":
			if c.Synced || !strings.Contains(c.Reason, "not followed") {
				t.Errorf("/readyz/clusters member1: %+v, want not synced, not followed", c)
			}
		case "member2":
			if !c.Synced {
				t.Errorf("/readyz/clusters member2: %+v, want synced", c)
			}
		}
	}

	// The Kubernetes API: pods are namespaced Pods, member2's still there.
	for _, path := range []string{"/api/v1/namespaces/default/pods", "/api/v1/pods", "/clusters/member2/api/v1/namespaces/default/pods"} {
		code, raw := getRaw(t, fv.REST+path)
		var l struct {
			Kind  string `json:"kind"`
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(raw, &l); err != nil || code != http.StatusOK || l.Kind != "PodList" {
			t.Fatalf("GET %s: %d %.300s, want a PodList", path, code, raw)
		}
		if !slices.ContainsFunc(l.Items, func(i struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}) bool {
			return i.Metadata.Name == "web" && i.Metadata.Annotations["fleetview.io/cluster"] == "member2"
		}) {
			t.Fatalf("GET %s: member2's pod missing: %.500s", path, raw)
		}
	}
	if code, raw := getRaw(t, fv.REST+"/clusters/member2/api/v1/namespaces/default/pods/web"); code != http.StatusOK || !bytes.Contains(raw, []byte(`"kind":"Pod"`)) {
		t.Fatalf("get member2's pod: %d %.300s", code, raw)
	}
	// member1's own view no longer serves pods: the record cost only it.
	if code, raw := getRaw(t, fv.REST+"/clusters/member1/api/v1/namespaces/default/pods"); code != http.StatusNotFound {
		t.Fatalf("member1's view of pods: %d %.300s, want 404", code, raw)
	}

	// Discovery: the built-in's kind, scope and short names.
	code, raw = getRaw(t, fv.REST+"/api/v1")
	var rl metav1.APIResourceList
	if err := json.Unmarshal(raw, &rl); err != nil || code != http.StatusOK {
		t.Fatalf("/api/v1: %d %s", code, raw)
	}
	for _, r := range rl.APIResources {
		if r.Name == "pods" && (r.Kind != "Pod" || !r.Namespaced || !slices.Equal(r.ShortNames, []string{"po"})) {
			t.Fatalf("discovery of pods: %+v", r)
		}
		if r.Name != "pods" && (slices.Contains(r.ShortNames, "svc") || slices.Contains(r.ShortNames, "deploy")) {
			t.Fatalf("short name hijacked: %+v", r)
		}
	}

	// kubectl, short name and all.
	kcv := filepath.Join(dir, "kubeconfig-fleetview")
	if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: fv.REST, Output: kcv}, io.Discard); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	for _, args := range [][]string{{"get", "po", "-A"}, {"get", "pods", "-n", "default"}} {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kcv, "--cache-dir", cacheDir}, args...)...).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "member2") || !strings.Contains(string(out), "web") {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	out, err := exec.CommandContext(cctx, fixture.KubectlBin, "--kubeconfig", kcv, "--cache-dir", cacheDir, "get", "svc", "-A").CombinedOutput()
	cancel()
	if err == nil || strings.Contains(string(out), "web") {
		t.Fatalf("kubectl get svc answered pods: %v\n%s", err, out)
	}
}

// getRaw GETs url and returns the status and body.
func getRaw(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
