package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relay"
)

// fakeRelay records what would be forwarded and answers 200 "member".
type fakeRelay struct{ got []*relay.Request }

func (f *fakeRelay) Do(_ context.Context, req *relay.Request) (*relay.Response, error) {
	f.got = append(f.got, req)
	return &relay.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"x"}},
		Body: io.NopCloser(strings.NewReader(`{"from":"member"}`))}, nil
}

// TestActThroughRouting: with act-through on, what the cache serves stays
// the cache's, what it does not is forwarded to the owning cluster, and
// what has no one cluster is refused naming the per-cluster path; every
// forwarded request gets an audit line.
func TestActThroughRouting(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		getErr             error
		code               int
		cluster, fwdPath   string // "" = not forwarded
		msg                string
	}{
		{"cached get stays in the cache", "GET", "/clusters/member1/api/v1/namespaces/shop/pods/web", nil, 200, "", "", `"name":"web"`},
		{"cached list stays in the cache", "GET", "/clusters/member1/api/v1/pods", nil, 200, "", "", `"kind":"PodList"`},
		{"uncached read per cluster", "GET", "/clusters/member2/api/v1/namespaces/shop/events", nil, 200, "member2", "/api/v1/namespaces/shop/events", "member"},
		{"uncached read in the fleet view", "GET", "/api/v1/namespaces/shop/events", nil, 404, "", "", "not cached"},
		{"patch per cluster", "PATCH", "/clusters/member2/api/v1/namespaces/shop/pods/web", nil, 200, "member2", "/api/v1/namespaces/shop/pods/web", "member"},
		{"create per cluster", "POST", "/clusters/member2/apis/apps/v1/namespaces/shop/deployments", nil, 200, "member2", "/apis/apps/v1/namespaces/shop/deployments", "member"},
		{"log per cluster", "GET", "/clusters/member1/api/v1/namespaces/shop/pods/web/log", nil, 200, "member1", "/api/v1/namespaces/shop/pods/web/log", "member"},
		{"discovery per cluster", "GET", "/clusters/member1/api/v1", nil, 200, "member1", "/api/v1", "member"},
		{"openapi per cluster", "GET", "/clusters/member1/openapi/v3", nil, 200, "member1", "/openapi/v3", "member"},
		{"fleet discovery stays the catalog's", "GET", "/api/v1", nil, 200, "", "", "APIResourceList"},
		{"fleet-view write goes to the owner", "DELETE", "/api/v1/namespaces/shop/pods/web", nil, 200, "member1", "/api/v1/namespaces/shop/pods/web", "member"},
		{"fleet-view log goes to the owner", "GET", "/api/v1/namespaces/shop/pods/web/log", nil, 200, "member1", "/api/v1/namespaces/shop/pods/web/log", "member"},
		{"fleet-view create is refused", "POST", "/api/v1/namespaces/shop/pods", nil, 400, "", "", "/clusters/{cluster}/api/v1/namespaces/shop/pods"},
		{"fleet-view ambiguous name is refused", "PATCH", "/api/v1/namespaces/shop/pods/web", status.Error(codes.AlreadyExists, "2 clusters"), 409, "", "",
			"held by more than one cluster: send the request to /clusters/{cluster}/api/v1/namespaces/shop/pods/web"},
		{"fleet-view ambiguous get names the per-cluster path", "GET", "/api/v1/namespaces/shop/pods/web", status.Error(codes.AlreadyExists, "ambiguous object"), 409, "", "",
			"ambiguous object; name the cluster: /clusters/{cluster}/api/v1/namespaces/shop/pods/web"},
		{"exec is 501", "POST", "/clusters/member1/api/v1/namespaces/shop/pods/web/exec", nil, 501, "", "", "no bidirectional streams"},
		{"unknown cluster stays 404", "PATCH", "/clusters/nope/api/v1/namespaces/shop/pods/web", nil, 405, "", "", "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRelay{}
			var audit bytes.Buffer
			admit := func(r *http.Request, cluster, ns string, gr schema.GroupResource) (relay.Caller, error) {
				return relay.Caller{User: "alice", Groups: []string{"dev"}}, nil
			}
			h := New(&fakeQuery{items: [][]byte{[]byte(podJSON)}, getErr: tc.getErr}, fakeCatalog(), nil, nil,
				ActThrough(ActThroughConfig{Relay: fr, Admit: admit, Audit: slog.New(slog.NewJSONHandler(&audit, nil))}))
			r := httptest.NewRequest(tc.method, tc.path+"?fieldManager=kubectl", strings.NewReader(`{}`))
			r.Header.Set("Authorization", "Bearer secret")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Fatalf("answer %d %s, want %d with %q", w.Code, w.Body, tc.code, tc.msg)
			}
			if tc.cluster == "" {
				if len(fr.got) != 0 {
					t.Fatalf("forwarded %+v", fr.got[0])
				}
				return
			}
			if len(fr.got) != 1 {
				t.Fatalf("forwarded %d requests", len(fr.got))
			}
			g := fr.got[0]
			if g.Cluster != tc.cluster || g.Path != tc.fwdPath || g.Method != tc.method || g.Query != "fieldManager=kubectl" || g.Caller.User != "alice" {
				t.Errorf("forwarded %s %s %s?%s as %v", g.Cluster, g.Method, g.Path, g.Query, g.Caller)
			}
			if g.Header.Get("Authorization") != "" || w.Header().Get("Set-Cookie") != "" {
				t.Errorf("headers passed that must not be: %v / %v", g.Header, w.Header())
			}
			var line map[string]any
			if err := json.Unmarshal(audit.Bytes(), &line); err != nil {
				t.Fatalf("audit line %q: %v", audit.String(), err)
			}
			if line["subject"] != "alice" || line["cluster"] != tc.cluster || line["memberStatus"] != float64(200) {
				t.Errorf("audit line %v", line)
			}
		})
	}
}
