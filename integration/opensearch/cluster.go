package opensearch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/integration/harness"
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Nodes is the number of nodes, each cluster-manager-eligible and a data
	// node. At least 1; 3 to survive losing one (a quorum of the voting
	// nodes must stay).
	Nodes int
	// Node is every node's options. HTTPPort must be 0 (each node takes a
	// free port). With DataDir set, node i keeps its data in DataDir/node-i
	// (Halt and Restart need it). Settings are applied after the
	// cluster's own (discovery), so a test can override them.
	Node Options
}

// Cluster is an OpenSearch cluster of several nodes, each in its own JVM.
type Cluster struct {
	Nodes []*Node
}

// URLs are the nodes' HTTP endpoints, in node order.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.URL()
	}
	return out
}

// Stop stops every node (in parallel: a node waiting for its peers would
// otherwise slow the others' shutdown).
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// NodeName is node i's node.name in a cluster named cluster, as OpenSearch
// reports it (e.g. in _cat/shards).
func NodeName(cluster string, i int) string { return fmt.Sprintf("%s-node-%d", cluster, i) }

// StartCluster starts opts.Nodes nodes that form one cluster: each has its
// own node.name and a fixed transport port, all seed each other and all
// are the initial cluster managers. The nodes start in parallel, since
// each Start waits for the cluster to be yellow, which needs a quorum of
// them. ctx bounds the start only; call Stop.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("opensearch cluster: %d nodes, want at least 1", opts.Nodes)
	}
	if opts.Node.HTTPPort != 0 {
		return nil, errors.New("opensearch cluster: Node.HTTPPort must be 0 (each node takes a free port)")
	}
	name := opts.Node.ClusterName
	if name == "" {
		name = "fleetview-test"
	}
	ports, err := freePorts(opts.Nodes)
	if err != nil {
		return nil, err
	}
	names := make([]string, opts.Nodes)
	seeds := make([]string, opts.Nodes)
	for i := range names {
		names[i] = NodeName(name, i)
		seeds[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
	}
	nodes := make([]*Node, opts.Nodes)
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		o := opts.Node
		o.ClusterName = name
		// The launcher applies -E settings last, over its single-node
		// defaults (node.name, discovery.type, transport.port).
		o.Settings = map[string]string{
			"node.name":      names[i],
			"discovery.type": "zen", // DiscoveryModule.ZEN2_DISCOVERY_TYPE
			"transport.port": strconv.Itoa(ports[i]),
			// Fixed ports, so a restarted node is found at the same address.
			"discovery.seed_hosts":                  strings.Join(seeds, ","),
			"cluster.initial_cluster_manager_nodes": strings.Join(names, ","),
		}
		maps.Copy(o.Settings, opts.Node.Settings)
		if opts.Node.DataDir != "" {
			o.DataDir = filepath.Join(opts.Node.DataDir, "node-"+strconv.Itoa(i))
		}
		wg.Go(func() { nodes[i], errs[i] = Start(ctx, o) })
	}
	wg.Wait()
	c := &Cluster{}
	for _, n := range nodes {
		if n != nil {
			c.Nodes = append(c.Nodes, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// StartTestCluster starts a cluster for a test, fails it (tb.Fatal) if the
// cluster cannot start, and stops it in tb.Cleanup.
func StartTestCluster(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	start := time.Now()
	c, err := StartCluster(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("start opensearch cluster: %v", err)
	}
	for i, n := range c.Nodes {
		tb.Logf("opensearch node %d at %s (pid %d)", i, n.URL(), n.PID())
	}
	tb.Logf("opensearch cluster of %d nodes ready in %v", len(c.Nodes), time.Since(start).Round(time.Millisecond))
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("stop opensearch cluster: %v", err)
		}
	})
	return c
}

// freePorts finds n distinct free ports on 127.0.0.1 through the harness,
// which hands a port out once per machine while its test process lives:
// integration packages run side by side, and a port probed with
// 127.0.0.1:0 and closed again could go to another process's listener
// (or an outgoing connection, the ephemeral range) before the node binds it.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		addr, err := harness.FreeAddr()
		if err != nil {
			return nil, fmt.Errorf("opensearch cluster: free port: %w", err)
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("opensearch cluster: free port: %w", err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("opensearch cluster: free port: %w", err)
		}
		ports = append(ports, port)
	}
	return ports, nil
}
