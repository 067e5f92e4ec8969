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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relay"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// fakeRelay records what would be forwarded and answers 200 with body
// (default {"from":"member"}).
type fakeRelay struct {
	got  []*relay.Request
	body string
}

func (f *fakeRelay) Do(_ context.Context, req *relay.Request) (*relay.Response, error) {
	f.got = append(f.got, req)
	body := f.body
	if body == "" {
		body = `{"from":"member"}`
	}
	return &relay.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"x"}},
		Body: io.NopCloser(strings.NewReader(body))}, nil
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
			if g.Cluster != tc.cluster || g.Target.Cluster != tc.cluster || g.Target.Path() != tc.fwdPath || g.Method != tc.method || g.Query != "fieldManager=kubectl" || g.Caller.User != "alice" {
				t.Errorf("forwarded %s %s %s?%s as %v", g.Cluster, g.Method, g.Target.Path(), g.Query, g.Caller)
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

// seqQuery answers Get with its answers in turn (the last one repeated):
// a cache catching up with a write.
type seqQuery struct {
	*fakeQuery
	answers []seqAnswer
	gets    int
}

type seqAnswer struct {
	rv  string // "" = NotFound
	err error
}

func (q *seqQuery) Get(_ context.Context, in *fleetviewv1.GetRequest, _ ...grpc.CallOption) (*fleetviewv1.GetResponse, error) {
	a := q.answers[min(q.gets, len(q.answers)-1)]
	q.gets++
	if a.err != nil {
		return nil, a.err
	}
	if a.rv == "" {
		return nil, status.Error(codes.NotFound, "not found")
	}
	return &fleetviewv1.GetResponse{Cluster: in.GetCluster(), RawObject: []byte(`{"metadata":{"name":"` + in.GetName() + `","resourceVersion":"` + a.rv + `"}}`)}, nil
}

// TestReadYourWrites: a forwarded write's answer waits until the cache
// holds the object at the resourceVersion the member returned (or without
// it after a delete), bounded, and says so in the audit line; past the
// bound it goes out with a Warning.
func TestReadYourWrites(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, answer string
		cache                      []seqAnswer
		bound                      time.Duration
		gets                       int
		caughtUp                   bool
		warning                    bool
	}{
		{"patch: until the cache has its version", "PATCH", "/clusters/member1/api/v1/namespaces/shop/pods/web",
			`{"kind":"Pod","metadata":{"name":"web","resourceVersion":"10"}}`, []seqAnswer{{rv: "9"}, {rv: "9"}, {rv: "10"}}, time.Second, 3, true, false},
		{"a later version will do", "PUT", "/clusters/member1/api/v1/namespaces/shop/pods/web",
			`{"kind":"Pod","metadata":{"name":"web","resourceVersion":"10"}}`, []seqAnswer{{rv: "12"}}, time.Second, 1, true, false},
		{"create: until the new object is cached", "POST", "/clusters/member1/api/v1/namespaces/shop/pods",
			`{"kind":"Pod","metadata":{"name":"new","resourceVersion":"5"}}`, []seqAnswer{{}, {}, {rv: "5"}}, time.Second, 3, true, false},
		{"scale: the owner's version", "PATCH", "/clusters/member2/apis/apps/v1/namespaces/shop/deployments/web/scale",
			`{"kind":"Scale","metadata":{"name":"web","resourceVersion":"7"}}`, []seqAnswer{{rv: "6"}, {rv: "7"}}, time.Second, 2, true, false},
		{"delete answered with a Status: until gone", "DELETE", "/clusters/member1/api/v1/namespaces/shop/pods/web",
			`{"kind":"Status","status":"Success"}`, []seqAnswer{{rv: "9"}, {}}, time.Second, 2, true, false},
		{"bounded: the answer goes out with a Warning", "PATCH", "/clusters/member1/api/v1/namespaces/shop/pods/web",
			`{"kind":"Pod","metadata":{"name":"web","resourceVersion":"10"}}`, []seqAnswer{{rv: "9"}}, 30 * time.Millisecond, -1, false, true},
		{"a cache the caller may not read: no wait", "PATCH", "/clusters/member1/api/v1/namespaces/shop/pods/web",
			`{"kind":"Pod","metadata":{"name":"web","resourceVersion":"10"}}`, []seqAnswer{{err: status.Error(codes.PermissionDenied, "no")}}, time.Second, 1, false, false},
		{"uncached resource: no wait", "POST", "/clusters/member2/api/v1/namespaces/shop/events",
			`{"kind":"Event","metadata":{"name":"e","resourceVersion":"10"}}`, []seqAnswer{{rv: "1"}}, time.Second, 0, false, false},
		{"a log is no write", "GET", "/clusters/member1/api/v1/namespaces/shop/pods/web/log", "some log", []seqAnswer{{rv: "1"}}, time.Second, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &seqQuery{fakeQuery: &fakeQuery{}, answers: tc.cache}
			var audit bytes.Buffer
			admit := func(*http.Request, string, string, schema.GroupResource) (relay.Caller, error) {
				return relay.Caller{User: "alice"}, nil
			}
			h := New(q, fakeCatalog(), nil, nil, ActThrough(ActThroughConfig{Relay: &fakeRelay{body: tc.answer}, Admit: admit,
				Audit: slog.New(slog.NewJSONHandler(&audit, nil)), ReadYourWrites: tc.bound}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}")))
			if w.Code != 200 || w.Body.String() != tc.answer {
				t.Fatalf("answer %d %q", w.Code, w.Body)
			}
			if tc.gets >= 0 && q.gets != tc.gets {
				t.Errorf("%d cache reads, want %d", q.gets, tc.gets)
			}
			if got := w.Header().Get("Warning") != ""; got != tc.warning {
				t.Errorf("Warning %q", w.Header().Get("Warning"))
			}
			var line map[string]any
			if err := json.Unmarshal(audit.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if got, _ := line["cacheCaughtUp"].(bool); got != tc.caughtUp {
				t.Errorf("audit line %v, want cacheCaughtUp %v", line, tc.caughtUp)
			}
		})
	}
}
