package opensearch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fos "github.com/fleetview/fleetview/store/opensearch"
)

// TestNode starts a real node. It fails (never skips) when java, mvn or the
// launcher are unavailable: the node is a required part of the test setup.
func TestNode(t *testing.T) {
	node := opensearch.StartTest(t, opensearch.Options{
		// Short-lived node: C1-only JIT starts faster.
		JVMArgs: []string{"-XX:TieredStopAtLevel=1"},
	})
	if !strings.HasPrefix(node.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL() = %q", node.URL())
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client, err := opensearchapi.NewClient(opensearchapi.Config{
		Client: osgo.Config{Addresses: []string{node.URL()}},
	})
	if err != nil {
		t.Fatal(err)
	}

	const index = "fleet-events"
	_, err = client.Indices.Create(ctx, opensearchapi.IndicesCreateReq{
		Index: index,
		Body: strings.NewReader(`{
			"settings": {"number_of_shards": 1, "number_of_replicas": 0},
			"mappings": {"properties": {
				"host": {"type": "keyword"},
				"message": {"type": "text"}
			}}
		}`),
	})
	if err != nil {
		t.Fatalf("create index: %v", err)
	}
	health, err := client.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{
		Indices: []string{index},
		Params:  opensearchapi.ClusterHealthParams{WaitForStatus: "green", Timeout: 30 * time.Second},
	})
	if err != nil {
		t.Fatalf("cluster health: %v", err)
	}
	if health.Status != "green" {
		t.Fatalf("index health %q, want green (replicas 0 on one node)", health.Status)
	}

	type doc struct {
		id      string
		version int
		host    string
		message string
	}
	docs := []doc{
		{"1", 5, "node-a", "disk pressure on /var"},
		{"2", 7, "node-b", "kubelet restarted"},
		{"3", 2, "node-a", "disk usage back to normal"},
	}
	var body strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&body, `{"index":{"_index":%q,"_id":%q,"version":%d,"version_type":"external"}}`+"\n", index, d.id, d.version)
		src, _ := json.Marshal(map[string]string{"host": d.host, "message": d.message})
		body.Write(src)
		body.WriteByte('\n')
	}
	bulk, err := client.Bulk(ctx, opensearchapi.BulkReq{
		Body:   strings.NewReader(body.String()),
		Params: opensearchapi.BulkParams{Refresh: "true"},
	})
	if err != nil {
		t.Fatalf("bulk: %v", err)
	}
	if bulk.Errors || len(bulk.Items) != len(docs) {
		t.Fatalf("bulk: errors=%v items=%d", bulk.Errors, len(bulk.Items))
	}
	for i, item := range bulk.Items {
		it := item["index"]
		if it.Status != http.StatusCreated || it.Version != docs[i].version {
			t.Errorf("bulk item %s: status %d version %d, want 201 version %d", it.ID, it.Status, it.Version, docs[i].version)
		}
	}

	search, err := client.Search(ctx, &opensearchapi.SearchReq{
		Indices: []string{index},
		Body:    strings.NewReader(`{"query":{"match":{"message":"disk"}}}`),
	})
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	var ids []string
	for _, h := range search.Hits.Hits {
		ids = append(ids, h.ID)
		var src struct{ Host string }
		if err := json.Unmarshal(h.Source, &src); err != nil || src.Host != "node-a" {
			t.Errorf("hit %s: source %s (err %v), want host node-a", h.ID, h.Source, err)
		}
	}
	sort.Strings(ids)
	if search.Hits.Total.Value != 2 || strings.Join(ids, ",") != "1,3" {
		t.Fatalf("match disk: total %d ids %v, want 2 hits [1 3]", search.Hits.Total.Value, ids)
	}

	// An older external version is rejected with 409 ...
	_, err = client.Index(ctx, opensearchapi.IndexReq{
		Index:      index,
		DocumentID: "1",
		Body:       strings.NewReader(`{"host":"node-a","message":"stale"}`),
		Params:     opensearchapi.IndexParams{Version: opensearchapi.ToPointer(4), VersionType: "external"},
	})
	var se *osgo.StructError
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.Err.Type != "version_conflict_engine_exception" {
		t.Fatalf("index with older external version: err = %v, want 409 version_conflict_engine_exception", err)
	}
	// ... also as a bulk item (whether the client also returns an error for
	// item failures depends on its error mask; the item status is what counts)...
	stale, _ := client.Bulk(ctx, opensearchapi.BulkReq{
		Body: strings.NewReader(fmt.Sprintf(`{"index":{"_index":%q,"_id":"2","version":7,"version_type":"external"}}`, index) +
			"\n" + `{"host":"node-b","message":"stale"}` + "\n"),
	})
	if stale == nil || !stale.Errors || len(stale.Items) != 1 || stale.Items[0]["index"].Status != http.StatusConflict {
		t.Fatalf("bulk with equal external version: resp=%+v, want item status 409", stale)
	}
	// ... while a newer one wins.
	if _, err := client.Index(ctx, opensearchapi.IndexReq{
		Index:      index,
		DocumentID: "1",
		Body:       strings.NewReader(`{"host":"node-a","message":"fresh"}`),
		Params:     opensearchapi.IndexParams{Version: opensearchapi.ToPointer(9), VersionType: "external"},
	}); err != nil {
		t.Fatalf("index with newer external version: %v", err)
	}
	got, err := client.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: index, DocumentID: "1"})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Version != 9 || !strings.Contains(string(got.Source), "fresh") {
		t.Fatalf("doc 1: version %d source %s, want version 9 with the fresh message", got.Version, got.Source)
	}

	t.Run("point-in-time quota", func(t *testing.T) { testPITQuota(ctx, t, node.URL()) })

	// Without a DataDir the data dies with the JVM: no restart.
	if err := node.Restart(ctx); !errors.Is(err, opensearch.ErrNoDataDir) {
		t.Fatalf("Restart without DataDir: err = %v, want ErrNoDataDir", err)
	}
	if err := node.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := client.Info(ctx, nil); err == nil {
		t.Fatalf("node still answers after Stop")
	}
}

// TestNodeRestart stops the JVM (cleanly, then with SIGKILL) and starts it
// again on the same data directory and port: acknowledged documents, their
// external versions and a versioned delete survive both.
func TestNodeRestart(t *testing.T) {
	dataDir := t.TempDir()
	node := opensearch.StartTest(t, opensearch.Options{
		DataDir: dataDir,
		JVMArgs: []string{"-XX:TieredStopAtLevel=1"},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	client, err := opensearchapi.NewClient(opensearchapi.Config{
		Client: osgo.Config{Addresses: []string{node.URL()}, DisableRetry: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	const index = "restart"
	if _, err := client.Indices.Create(ctx, opensearchapi.IndicesCreateReq{
		Index: index,
		Body:  strings.NewReader(`{"settings": {"number_of_shards": 1, "number_of_replicas": 0}}`),
	}); err != nil {
		t.Fatalf("create index: %v", err)
	}
	put := func(id string, version int, msg string) {
		t.Helper()
		// No refresh: what counts is that the write was acknowledged (the
		// translog is fsynced per request by default).
		if _, err := client.Index(ctx, opensearchapi.IndexReq{
			Index: index, DocumentID: id, Body: strings.NewReader(fmt.Sprintf(`{"message":%q}`, msg)),
			Params: opensearchapi.IndexParams{Version: opensearchapi.ToPointer(version), VersionType: "external"},
		}); err != nil {
			t.Fatalf("index %s@%d: %v", id, version, err)
		}
	}
	check := func(when string, want map[string]int) {
		t.Helper()
		for id, version := range want {
			got, err := client.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: index, DocumentID: id})
			if version == 0 {
				var se *osgo.StructError
				if got != nil && got.Found {
					t.Errorf("%s: deleted doc %s found (version %d)", when, id, got.Version)
				} else if err != nil && !(errors.As(err, &se) && se.Status == http.StatusNotFound) && !strings.Contains(err.Error(), "404") {
					t.Errorf("%s: get deleted doc %s: %v", when, id, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: get %s: %v", when, id, err)
			}
			if !got.Found || got.Version != version || !strings.Contains(string(got.Source), fmt.Sprintf("v%d", version)) {
				t.Errorf("%s: doc %s found=%v version %d source %s, want version %d", when, id, got.Found, got.Version, got.Source, version)
			}
		}
	}

	put("a", 3, "v3")
	put("b", 5, "v5")
	put("gone", 2, "v2")
	if _, err := client.Document.Delete(ctx, opensearchapi.DocumentDeleteReq{Index: index, DocumentID: "gone",
		Params: opensearchapi.DocumentDeleteParams{Version: opensearchapi.ToPointer(4), VersionType: "external"}}); err != nil {
		t.Fatalf("versioned delete: %v", err)
	}
	url, pid := node.URL(), node.PID()

	if err := node.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if node.URL() != url || node.PID() == pid || node.PID() == 0 {
		t.Fatalf("after restart: url %s pid %d, want url %s and a new pid (was %d)", node.URL(), node.PID(), url, pid)
	}
	check("after SIGTERM restart", map[string]int{"a": 3, "b": 5, "gone": 0})

	put("a", 7, "v7")
	put("c", 1, "v1")
	pid = node.PID()
	if err := node.Halt(syscall.SIGKILL); err != nil {
		t.Fatalf("halt with SIGKILL: %v", err)
	}
	if node.PID() != 0 {
		t.Fatalf("PID() = %d while halted", node.PID())
	}
	if _, err := client.Info(ctx, nil); err == nil {
		t.Fatalf("node still answers after Halt(SIGKILL) of pid %d", pid)
	}
	if err := node.Restart(ctx); err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	check("after SIGKILL restart", map[string]int{"a": 7, "b": 5, "c": 1, "gone": 0})

	// The external versions survived too: an older write is still refused.
	_, err = client.Index(ctx, opensearchapi.IndexReq{
		Index: index, DocumentID: "a", Body: strings.NewReader(`{"message":"v6"}`),
		Params: opensearchapi.IndexParams{Version: opensearchapi.ToPointer(6), VersionType: "external"},
	})
	var se *osgo.StructError
	if !errors.As(err, &se) || se.Status != http.StatusConflict {
		t.Fatalf("older external version after restarts: err = %v, want 409", err)
	}
	check("after stale write", map[string]int{"a": 7})

	if err := node.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if entries, err := os.ReadDir(dataDir); err != nil || len(entries) == 0 {
		t.Fatalf("data dir after Stop: %d entries, err %v; Stop must leave the caller's DataDir", len(entries), err)
	}
	if err := node.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop: no error")
	}
}

func TestStartErrors(t *testing.T) {
	ctx := t.Context()
	if _, err := opensearch.Start(ctx, opensearch.Options{Java: "/nonexistent/java"}); err == nil {
		t.Error("Start with a missing java: no error")
	}
	if _, err := opensearch.Start(ctx, opensearch.Options{LauncherDir: t.TempDir()}); err == nil {
		t.Error("Start with an empty launcher dir: no error")
	}
	// A node that dies during startup: the error carries its stderr.
	_, err := opensearch.Start(ctx, opensearch.Options{
		Settings: map[string]string{"fleetview.no.such.setting": "x"},
		JVMArgs:  []string{"-XX:TieredStopAtLevel=1"},
	})
	if err == nil || !strings.Contains(err.Error(), "fleetview.no.such.setting") {
		t.Errorf("Start with an unknown setting: err = %v, want the launcher's complaint about it", err)
	}
	if testing.Verbose() {
		t.Logf("startup error looks like:\n%v", err)
	}
}

// testPITQuota runs fleetview's OpenSearch store on the node with a quota
// of one paged list per client: a client's second list closes its first
// list's point in time in OpenSearch, whose token is then ErrExpired
// (OpenSearch's own answer for a closed point in time); another client's
// list is untouched; a list's last page closes its point in time, so none
// is left open in the node.
func testPITQuota(ctx context.Context, t *testing.T, url string) {
	st, err := fos.Open(fos.Options{Addresses: []string{url}, IndexPrefix: "pitq-", CheckpointIndex: "pitq-checkpoints",
		MaxSnapshots: 4, MaxSnapshotsPerClient: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var events []feed.Event
	for i := range 12 {
		events = append(events, feed.Event{Seq: uint64(i + 1), Event: benchdata.Event("c1", i, i+1)})
	}
	if err := st.Apply(ctx, "c1", events, 12); err != nil {
		t.Fatalf("apply: %v", err)
	}
	openPITs := func() int {
		// Every point in time the node holds, whoever opened it.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/_search/point_in_time/_all", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res struct {
			PITs []json.RawMessage `json:"pits"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			t.Fatalf("list points in time: %v", err)
		}
		return len(res.PITs)
	}
	list := func(client, cont string) (query.Page, error) {
		return st.List(ctx, query.ListOptions{GVR: benchdata.PodGVR, Limit: 5, Client: client, Continue: cont})
	}
	first := map[string]string{}
	for _, c := range []string{"a", "b", "a"} {
		p, err := list(c, "")
		if err != nil || p.Continue == "" {
			t.Fatalf("first page for %s: %q %v", c, p.Continue, err)
		}
		if first[c] == "" {
			first[c] = p.Continue
		} else {
			first[c+"2"] = p.Continue
		}
	}
	if n := openPITs(); n != 2 {
		t.Fatalf("%d points in time open in the node, want 2 (a's first closed by its quota)", n)
	}
	if _, err := list("a", first["a"]); !errors.Is(err, query.ErrExpired) {
		t.Fatalf("a's evicted token: %v, want ErrExpired", err)
	}
	for _, k := range []string{"b", "a2"} {
		cont, items := first[k], 5
		for cont != "" {
			p, err := list(k[:1], cont)
			if err != nil {
				t.Fatalf("%s: next page: %v", k, err)
			}
			items += len(p.Items)
			cont = p.Continue
		}
		if items != 12 {
			t.Fatalf("%s listed %d pods, want 12", k, items)
		}
	}
	if n := openPITs(); n != 0 {
		t.Fatalf("%d points in time open after every list's last page", n)
	}
}

// TestCluster starts three nodes that form one cluster: every node sees
// all three, each under its own name.
func TestCluster(t *testing.T) {
	c := opensearch.StartTestCluster(t, opensearch.ClusterOptions{Nodes: 3,
		Node: opensearch.Options{HeapMB: 384, JVMArgs: []string{"-XX:TieredStopAtLevel=1"}, ClusterName: "fv-cluster"}})
	want := []string{opensearch.NodeName("fv-cluster", 0), opensearch.NodeName("fv-cluster", 1), opensearch.NodeName("fv-cluster", 2)}
	for _, u := range c.URLs() {
		resp, err := http.Get(u + "/_cat/nodes?h=name&format=json")
		if err != nil {
			t.Fatal(err)
		}
		var nodes []struct{ Name string }
		err = json.NewDecoder(resp.Body).Decode(&nodes)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range nodes {
			got = append(got, n.Name)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s sees nodes %v, want %v", u, got, want)
		}
	}
}
