package store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	itos "github.com/fleetview/fleetview/integration/opensearch"
)

// osNode is the OpenSearch node TestServeReroutesResources and
// TestOpenSearchCountsAndRelationsAgreeWithBadger share (a node's start
// is most of a short test's time): neither stops nor restarts it, each
// gets it with no index left by an earlier test, and each keeps to
// indices of its own (the reroute test's serve the default
// "kubernetes-" prefix and fleetview-checkpoints, the relations test
// "rel-" and fleetview-rel-checkpoints, outside the "rel-*" its reads
// search, and "v1-"). The tests that halt, restart or kill a node
// (TestMaterializerOpenSearchRestart, TestServeRoutesRegistriesToBackends,
// TestOpenSearchClusterLosesANode) start their own.
var osNode = &sharedNode{opts: itos.Options{JVMArgs: []string{"-XX:TieredStopAtLevel=1"}}}

func TestMain(m *testing.M) { os.Exit(osNode.run(m)) }

// sharedNode starts its node on the first get and stops it after the
// package's tests.
type sharedNode struct {
	opts itos.Options

	once sync.Once
	node *itos.Node
	err  error
}

func (s *sharedNode) get(t *testing.T) *itos.Node {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		s.node, s.err = itos.Start(ctx, s.opts)
		if s.err == nil {
			t.Logf("shared opensearch node at %s (pid %d) ready in %v", s.node.URL(), s.node.PID(), time.Since(start).Round(time.Millisecond))
		}
	})
	if s.err != nil {
		t.Fatalf("start the shared opensearch node: %v", s.err)
	}
	s.wipe(t)
	return s.node
}

// wipe deletes every index an earlier test (or an earlier run of the same
// test, -count) left, so each test starts on an empty node as on a fresh
// one.
func (s *sharedNode) wipe(t *testing.T) {
	t.Helper()
	resp, err := http.Get(s.node.URL() + "/_cat/indices?h=index")
	if err != nil {
		t.Fatalf("list the shared node's indices: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list the shared node's indices: %d %s %v", resp.StatusCode, b, err)
	}
	for _, index := range strings.Fields(string(b)) {
		if strings.HasPrefix(index, ".") {
			continue // OpenSearch's own
		}
		req, _ := http.NewRequest(http.MethodDelete, s.node.URL()+"/"+url.PathEscape(index), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("delete index %s on the shared node: %v", index, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("delete index %s on the shared node: %d %s", index, resp.StatusCode, b)
		}
	}
}

// run runs the package's tests and stops the node if one started it; a
// failure to stop fails the run.
func (s *sharedNode) run(m *testing.M) int {
	code := m.Run()
	if s.node != nil {
		if err := s.node.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the shared opensearch node: %v\n", err)
			code = max(code, 1)
		}
	}
	return code
}
