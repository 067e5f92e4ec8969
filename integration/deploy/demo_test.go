package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/fixture"
)

// TestDemoQuickStart runs the README's first command, `bash
// scripts/demo.sh`, as a newcomer would (no terminal: it runs its queries
// and stops), on three real member clusters. What the README promises
// must hold: the kubectl queries it leads with run and print every
// cluster's rows, the fleet kubeconfig is written, and the last line is the
// export that puts the demo's fleetview on PATH and the kubeconfig in
// KUBECONFIG (the README's next commands answered "command not found"
// before it).
func TestDemoQuickStart(t *testing.T) {
	fixture.RequireKubectl(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/demo.sh")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "FLEETVIEW_DEMO_DIR="+dir, "FLEETVIEW_HTTP="+fixture.FreeAddr(t), "FLEETVIEW_GRPC="+fixture.FreeAddr(t))
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, text)
	}
	if strings.Contains(text, "command not found") {
		t.Errorf("the demo ran a command it could not find:\n%s", text)
	}

	// The fleet view's Table: the CLUSTER column first after kubectl's own
	// NAMESPACE, every member's Pods.
	pods := section(t, text, "$ kubectl --context fleet get pods -A")
	if head := strings.Fields(strings.SplitN(pods, "\n", 2)[0]); len(head) < 3 || head[0] != "NAMESPACE" || head[1] != "CLUSTER" || head[2] != "NAME" {
		t.Errorf("kubectl get pods -A does not show NAMESPACE, CLUSTER, NAME first:\n%s", pods)
	}
	for _, c := range []string{"member1", "member2", "member3"} {
		if !regexp.MustCompile(`(?m)^` + c + `\s`).MatchString(section(t, text, "$ kubectl --context fleet get deploy -n shop -o wide")) {
			t.Errorf("kubectl get deploy -n shop shows no row of %s:\n%s", c, text)
		}
	}
	if one := section(t, text, "$ kubectl --context member2 get pods -n shop"); strings.Contains(one, "member1") || !strings.Contains(one, "Running") && !strings.Contains(one, "Pending") {
		t.Errorf("the per-cluster view of member2 is not member2's Pods:\n%s", one)
	}
	if !strings.Contains(section(t, text, "$ kubectl api-resources"), "deployments") {
		t.Errorf("kubectl api-resources does not list the cached deployments:\n%s", text)
	}

	// The kubectl plugin, found on the demo's PATH: the Deployments the
	// demo created, each cluster's, in the change feed.
	feed := section(t, text, "$ kubectl fleet changes --since 10m --resource deploy -n shop")
	for _, c := range []string{"member1", "member2", "member3"} {
		if !regexp.MustCompile(`(?m)^\S+\s+` + c + `\s+ADDED\s+deployments\.apps\s+shop\s`).MatchString(feed) {
			t.Errorf("kubectl fleet changes shows no Deployment ADDED in %s:\n%s", c, feed)
		}
	}

	lines := strings.Split(strings.TrimSpace(text), "\n")
	want := `export PATH="` + dir + `/bin:$PATH" KUBECONFIG="` + dir + `/fleet.kubeconfig"`
	if last := lines[len(lines)-1]; last != want {
		t.Errorf("the demo's last line is %q, want %q", last, want)
	}
	for _, f := range []string{"bin/fleetview", "bin/kubectl-fleet", "fleet.kubeconfig"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the demo left no %s: %v", f, err)
		}
	}
}

// section is what the demo printed for the command line that starts with
// head, up to the next command it ran.
func section(t *testing.T, text, head string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, "\n"+head)
	if !ok {
		t.Fatalf("the demo did not run %q:\n%s", head, text)
	}
	_, after, _ = strings.Cut(after, "\n")
	before, _, _ := strings.Cut(after, "\n$ ")
	return strings.TrimSpace(before)
}
