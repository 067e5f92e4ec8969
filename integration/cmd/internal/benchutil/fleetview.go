package benchutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fleetview/fleetview/integration/harness"
)

// StartFleet starts the member clusters names and fills each with
// populate, all at once; the time is the filling's. On an error the fleet
// is stopped.
func StartFleet(ctx context.Context, names []string, populate func(context.Context, *harness.Cluster) error) (*harness.Fleet, time.Duration, error) {
	Logf("starting %d member clusters", len(names))
	fleet, err := harness.Start(ctx, harness.Options{Clusters: names})
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range fleet.Clusters() {
		g.Go(func() error { return populate(gctx, c) })
	}
	if err := g.Wait(); err != nil {
		_ = fleet.Stop()
		return nil, 0, err
	}
	return fleet, time.Since(t0), nil
}

// Workdir makes a temporary directory (prefix: the program's) holding
// the fleetview binary, built now unless FV_BENCH_BIN names one (the test
// script builds it once for every benchmark, as bench-materializer takes
// it), and a kubeconfig with a context per member of fleet as its
// collector user. The caller removes dir.
func Workdir(ctx context.Context, fleet *harness.Fleet, prefix string) (dir, bin, kubeconfig string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if bin = os.Getenv("FV_BENCH_BIN"); bin == "" {
		bin = filepath.Join(dir, "fleetview")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/fleetview/fleetview/cmd/fleetview")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return "", "", "", fmt.Errorf("build fleetview: %w", err)
		}
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kubeconfig, "collector"); err != nil {
		return "", "", "", err
	}
	return dir, bin, kubeconfig, nil
}

// HubAddrs are the addresses one `fleetview up` listens on.
type HubAddrs struct {
	GRPC, HTTP, NATS, Metrics string // host:port
	NATSPort                  string // NATS's port alone (--nats-port)
}

// NewHubAddrs takes the harness's free addresses: locked machine-wide, so
// nothing else the machine runs is handed them too.
func NewHubAddrs() (HubAddrs, error) {
	var addrs [4]string
	for i := range addrs {
		var err error
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return HubAddrs{}, err
		}
	}
	_, natsPort, err := net.SplitHostPort(addrs[2])
	if err != nil {
		return HubAddrs{}, err
	}
	return HubAddrs{GRPC: addrs[0], HTTP: addrs[1], NATS: addrs[2], Metrics: addrs[3], NATSPort: natsPort}, nil
}

// Loadavg is the machine's load (1, 5 and 15 minutes), "" if unknown.
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return ""
	}
	var l1, l5, l15 string
	_, _ = fmt.Sscan(string(b), &l1, &l5, &l15)
	return l1 + " " + l5 + " " + l15
}
