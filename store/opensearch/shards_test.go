package opensearch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/query"
)

// Answers of a cluster that lost a data node: a search some shards failed
// (200, with the other shards' hits only), one every shard failed, and a
// search that timed out.
const (
	partialSearch   = `{"timed_out":false,"_shards":{"total":2,"successful":1,"skipped":0,"failed":1,"failures":[{"shard":1,"index":"kubernetes-pod","node":"n2","reason":{"type":"node_not_connected_exception","reason":"[n2] Node not connected"}}]},"hits":{"hits":[]}}`
	allShardsFailed = `{"error":{"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true,"failed_shards":[]},"status":503}`
	timedOutSearch  = `{"timed_out":true,"_shards":{"total":2,"successful":2,"skipped":0,"failed":0},"hits":{"hits":[]}}`
	partialPIT      = `{"pit_id":"partial","_shards":{"total":2,"successful":1,"skipped":0,"failed":1},"creation_time":1}`
)

// TestIncompleteSearches: a search some shards did not answer is never
// read as a whole one. A live read retries until the shards answer again
// (a replica promoted), else fails with ErrNotReady naming the failed
// shard; a page of a point in time that lost shards is ErrExpired at once,
// so the client lists again; a point in time that lacks shards is not
// used.
func TestIncompleteSearches(t *testing.T) {
	ctx := context.Background()
	// faults answers the first n searches (n < 0: all) of the given kind
	// with status and body.
	type fault struct {
		what   string // "live", "pit", "checkpoints", "open-pit"
		n      int
		status int
		body   string
	}
	cases := []struct {
		name    string
		fault   fault
		read    string // "list", "continue", "get", "versions"
		wantErr error
		wantIn  string // in the error
		// wantSearches: searches of the faulted kind sent (0: not checked).
		wantSearches int
	}{
		{"live list retries a partial answer", fault{"live", 2, 200, partialSearch}, "list", nil, "", 3},
		{"live list retries all shards failed", fault{"live", 2, 503, allShardsFailed}, "list", nil, "", 3},
		{"live list retries a timed out search", fault{"live", 1, 200, timedOutSearch}, "list", nil, "", 2},
		{"live list: shards lost for good", fault{"live", -1, 200, partialSearch}, "list", query.ErrNotReady, `1 of 2 shards failed (kubernetes-pod[1] on node "n2": node_not_connected_exception`, 0},
		{"live list: timed out for good", fault{"live", -1, 200, timedOutSearch}, "list", query.ErrNotReady, "timed out", 0},
		{"get retries a partial answer", fault{"live", 1, 200, partialSearch}, "get", nil, "", 2},
		{"get: shards lost for good", fault{"live", -1, 200, partialSearch}, "get", query.ErrNotReady, "shards failed", 0},
		{"versions retry a partial answer", fault{"checkpoints", 1, 200, partialSearch}, "versions", nil, "", 2},
		{"versions: shards lost for good", fault{"checkpoints", -1, 200, partialSearch}, "versions", query.ErrNotReady, "shards failed", 0},
		{"continue token on a snapshot that lost a shard", fault{"pit", -1, 200, partialSearch}, "continue", query.ErrExpired, "lost shards when a node left", 1},
		{"continue token on a snapshot that lost every shard", fault{"pit", -1, 503, allShardsFailed}, "continue", query.ErrExpired, "lost shards when a node left", 1},
		{"continue token on a snapshot that timed out", fault{"pit", -1, 200, timedOutSearch}, "continue", query.ErrExpired, "timed out", 1},
		{"a first page whose own snapshot lost a shard is read live", fault{"pit", -1, 200, partialSearch}, "first-page", nil, "", 1},
		{"a first search page whose own snapshot lost a shard is read live", fault{"pit", -1, 503, allShardsFailed}, "first-search", nil, "", 1},
		{"a partial point in time is not used", fault{"open-pit", -1, 200, partialPIT}, "list", nil, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, s := newFakeSearchWith(t, Options{ReadRetry: 300 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
			armed, searches := false, 0
			f.fault = func(method, path, pit string) (int, string, bool) {
				var what string
				switch {
				case method == http.MethodPost && strings.HasSuffix(path, "/_search/point_in_time"):
					what = "open-pit"
				case strings.HasPrefix(path, "/fleetview-checkpoints/"):
					what = "checkpoints"
				case !strings.HasSuffix(path, "/_search"):
					return 0, "", false
				case pit != "":
					what = "pit"
				default:
					what = "live"
				}
				if !armed || what != tc.fault.what {
					return 0, "", false
				}
				searches++
				if tc.fault.n >= 0 && searches > tc.fault.n {
					return 0, "", false
				}
				return tc.fault.status, tc.fault.body, true
			}
			o := query.ListOptions{GVR: podGVR}
			if tc.fault.what == "open-pit" {
				o.Limit = 100 // one page, on a point in time if there is a whole one
			}
			if tc.read == "continue" {
				o.Limit = 7
				p, err := s.List(ctx, o)
				if err != nil || p.Continue == "" {
					t.Fatalf("first page: %q %v", p.Continue, err)
				}
				o.Continue = p.Continue
			}
			f.mu.Lock()
			armed = true
			f.mu.Unlock()
			var err error
			var items int
			switch tc.read {
			case "first-page":
				// One page of 7 on a point in time: live, so no token.
				var p query.Page
				p, err = s.List(ctx, query.ListOptions{GVR: podGVR, Limit: 7})
				if err == nil && (len(p.Items) != 7 || p.Continue == "") {
					t.Errorf("first page of %d items, continue %q", len(p.Items), p.Continue)
				}
			case "first-search":
				var p query.Page
				p, err = s.Search(ctx, query.SearchOptions{Limit: 7})
				if err == nil && len(p.Items) != 7 {
					t.Errorf("first search page of %d items", len(p.Items))
				}
			case "list", "continue":
				var p query.Page
				p, err = s.List(ctx, o)
				items = len(p.Items)
				if err == nil && tc.read == "list" && items != len(f.docs) {
					t.Errorf("listed %d objects, want all %d", items, len(f.docs))
				}
			case "get":
				var obj query.Object
				obj, err = s.Get(ctx, query.GetOptions{GVR: podGVR, Namespace: "ns-0", Name: "pod-00", Cluster: "c1"})
				if err == nil && obj.Cluster != "c1" {
					t.Errorf("got %+v", obj)
				}
			case "versions":
				var v query.Version
				v, err = s.Versions(ctx)
				if err == nil && len(v) != 2 {
					t.Errorf("versions %v, want both clusters'", v)
				}
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && !strings.Contains(err.Error(), tc.wantIn):
				t.Fatalf("error %q lacks %q", err, tc.wantIn)
			case tc.wantErr != nil && items != 0:
				t.Fatalf("a failed read returned %d items", items)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if tc.wantSearches > 0 && searches != tc.wantSearches {
				t.Errorf("%d %s requests, want %d", searches, tc.fault.what, tc.wantSearches)
			}
			if strings.HasPrefix(tc.read, "first-") && (len(f.closed) != 1 || f.closed[0] != "pit-1") {
				t.Errorf("closed %v, want the first page's own point in time", f.closed)
			}
			if strings.HasPrefix(tc.read, "first-") && (len(f.closed) != 1 || f.closed[0] != "pit-1") {
				t.Errorf("closed %v, want the first page's own point in time", f.closed)
			}
			if tc.fault.what == "open-pit" {
				for _, pit := range f.searched {
					if pit == "partial" {
						t.Fatal("a page read the partial point in time")
					}
				}
				if len(f.closed) != 1 || f.closed[0] != "partial" {
					t.Fatalf("closed %v, want the partial point in time", f.closed)
				}
			}
		})
	}
}
