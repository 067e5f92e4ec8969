package kubeapi

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/cmd/fleetview/cli"
	"github.com/fleetview/fleetview/integration/fixture"
)

// hubKubectl writes the fleet's kubeconfig for the hub at server (the
// command users run, `fleetview kubeconfig`) and returns Debian's kubectl
// against it. The discovery cache is the test's own (kubectl caches it by
// host:port, which other runs may have used); with freshCache every call
// has its own, for tests whose kinds come and go faster than kubectl's
// cache expires.
func hubKubectl(t *testing.T, ctx context.Context, server string, freshCache bool) func(args ...string) (string, error) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cli.RunKubeconfig(ctx, cli.KubeconfigOptions{Server: server, Output: kc}, io.Discard); err != nil {
		t.Fatalf("fleetview kubeconfig: %v", err)
	}
	cacheDir := t.TempDir()
	return func(args ...string) (string, error) {
		dir := cacheDir
		if freshCache {
			dir = t.TempDir()
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, fixture.KubectlBin, append([]string{"--kubeconfig", kc, "--cache-dir", dir}, args...)...).CombinedOutput()
		return string(out), err
	}
}

// clusterRows runs kubectl with args and returns its rows as sorted
// "cluster/namespace/name": the fleet's table has NAMESPACE, CLUSTER and
// NAME first; "No resources found" is no row.
func clusterRows(kubectl func(args ...string) (string, error), args ...string) ([]string, error) {
	out, err := kubectl(args...)
	if err != nil {
		return nil, fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if strings.HasPrefix(strings.TrimSpace(out), "No resources found") {
		return nil, nil
	}
	table := fixture.TableRows(out)
	if len(table) == 0 || len(table[0]) < 3 || !slices.Equal(table[0][:3], []string{"NAMESPACE", "CLUSTER", "NAME"}) {
		return nil, fmt.Errorf("kubectl %s: no NAMESPACE CLUSTER NAME table:\n%s", strings.Join(args, " "), out)
	}
	var got []string
	for _, r := range table[1:] {
		got = append(got, r[1]+"/"+r[0]+"/"+r[2])
	}
	slices.Sort(got)
	return got, nil
}
