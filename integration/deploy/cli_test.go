package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
	"github.com/fleetview/fleetview/integration/fixture"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {server: "https://%s", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: gone
  context: {cluster: gone, user: u}
current-context: gone
`

// TestCLIAndBadInput drives the real binary's registry commands against
// `fleetview up`, whose only member cluster cannot be reached.
func TestCLIAndBadInput(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(unreachableKubeconfig, fixture.FreeAddr(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	o := app.UpOptions{ServeOptions: app.ServeOptions{StateDir: filepath.Join(dir, "state"), GRPCAddr: fixture.FreeAddr(t), HTTPAddr: fixture.FreeAddr(t)},
		Kubeconfig: kc, Contexts: []string{"gone"}, NATSPort: -1}
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)

	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(args, "--server", o.GRPCAddr)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: search.karmada.io/v1alpha1
kind: ResourceRegistry
metadata:
  name: Bad_Name
spec:
  targetCluster:
    fieldSelector:
      matchExpressions: [{key: color, operator: In, values: [blue]}]
  resourceSelectors:
    - {apiVersion: "apps/v1/x", kind: Deployment}
    - {apiVersion: v1, kind: Pod, namespace: "Not A Namespace"}
  backendStore:
    openSearch:
      addresses: ["ftp://opensearch:9200"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cli("registry", "apply", "-f", bad)
	if err == nil {
		t.Fatalf("invalid registry accepted:\n%s", out)
	}
	for _, path := range []string{"metadata.name", "spec.targetCluster.fieldSelector.matchExpressions[0].key",
		"spec.resourceSelectors[0].apiVersion", "spec.resourceSelectors[1].namespace", "spec.backendStore.openSearch.addresses[0]"} {
		if !strings.Contains(out, path) {
			t.Errorf("error output does not name %s:\n%s", path, out)
		}
	}
	unknown := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknown, []byte("apiVersion: fleetview.io/v1alpha1\nkind: ResourceRegistry\nmetadata: {name: x}\nspec:\n  targetCluster: {}\n  resourceSelectors: [{apiVersion: v1, kind: Pod}]\n  colour: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("registry", "apply", "-f", unknown); err == nil || !strings.Contains(out, "spec.colour") {
		t.Fatalf("unknown field: %v\n%s", err, out)
	}
	if out, err := cli("registry", "apply", "-f", filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(out, "absent.yaml") {
		t.Fatalf("missing file: %v\n%s", err, out)
	}
	// The API refuses too, for clients that skip the CLI's local check.
	if _, err := fv.Registries.ApplyRegistry(context.Background(), &fleetviewv1.ApplyRegistryRequest{}); err == nil {
		t.Fatal("empty registry accepted over gRPC")
	}
	if out, err := cli("registry", "list"); err != nil || strings.TrimSpace(out) != "NAME" {
		t.Fatalf("something was stored: %v\n%s", err, out)
	}

	seed := fixture.RepoPath(t, "internal", "registry", "testdata", "seed-registry.yaml")
	if out, err := cli("registry", "apply", "-f", seed); err != nil || !strings.Contains(out, "resourceregistry/clustercache-sample applied") {
		t.Fatalf("apply seed: %v\n%s", err, out)
	}
	if out, err := cli("registry", "get", "clustercache-sample"); err != nil || !strings.Contains(out, "apiVersion: search.karmada.io/v1alpha1") || !strings.Contains(out, "networking.k8s.io/v1") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if out, err := cli("registry", "get", "nope"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("get missing: %v\n%s", err, out)
	}
	if out, err := cli("registry", "delete", "clustercache-sample"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}

	// An unreachable member cluster is reported, not fatal.
	fixture.Eventually(t, 30*time.Second, func() error {
		c, err := fv.Clusters.GetCluster(context.Background(), &fleetviewv1.GetClusterRequest{Name: "gone"})
		if err != nil {
			return err
		}
		if c.GetReady() || !strings.Contains(c.GetMessage(), "unreachable") {
			return fmt.Errorf("cluster gone: ready=%v message=%q", c.GetReady(), c.GetMessage())
		}
		return nil
	})

	// Flags: every problem at once, naming each.
	raw, err := exec.Command(bin, "up", "--state-dir", "", "--grpc-addr", "nope", "--nats-host", "0.0.0.0").CombinedOutput()
	out = string(raw)
	if err == nil || !strings.Contains(out, "--state-dir") || !strings.Contains(out, "--grpc-addr") || !strings.Contains(out, "--nats-host 0.0.0.0") {
		t.Fatalf("bad flags: %v\n%s", err, out)
	}
	raw, err = exec.Command(bin, "up", "--kubeconfig", kc, "--context", "member7", "--state-dir", t.TempDir()).CombinedOutput()
	out = string(raw)
	if err == nil || !strings.Contains(out, `context "member7" not found`) {
		t.Fatalf("missing context: %v\n%s", err, out)
	}
}
