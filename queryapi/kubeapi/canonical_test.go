package kubeapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/relay"
)

// TestActThroughCanonical is issue #43 at the hub: a request is read once,
// from its escaped path; what admission judges, the audit line names and
// the relay carries is that one typed request. An escaped separator or
// escape in any position is 400 before anything is judged or sent; a path
// shaped like discovery is discovery only in discovery's shapes; the proxy
// subresources are 501 like exec unless the hub's Proxy allows them.
func TestActThroughCanonical(t *testing.T) {
	type admitted struct {
		cluster, namespace string
		gr                 schema.GroupResource
	}
	for _, tc := range []struct {
		name, method, path string
		proxy              bool
		code               int
		admit              *admitted // nil: nothing judged, nothing sent
		sent               string    // the target's path
	}{
		{"a Pod", "GET", "/clusters/member2/api/v1/namespaces/shop/pods/web/log", false, 200,
			&admitted{"member2", "shop", schema.GroupResource{Resource: "pods"}}, "/api/v1/namespaces/shop/pods/web/log"},
		{"escaped escaped slashes in the name", "GET", "/clusters/member2/api/v1/namespaces/shop/pods/web%252F..%252F..%252Fkube-system%252Fsecrets%252Fs/log", false, 400, nil, ""},
		{"escaped slashes in the namespace", "DELETE", "/clusters/member2/api/v1/namespaces/shop%2F..%2Fkube-system/configmaps/c", false, 400, nil, ""},
		{"escaped slash in the version", "GET", "/clusters/member2/api/v1%2Fnamespaces%2Fkube-system%2Fsecrets", false, 400, nil, ""},
		{"escaped escaped slash in the version", "GET", "/clusters/member2/api/v1%252Fnamespaces%252Fkube-system%252Fsecrets", false, 400, nil, ""},
		{"escaped slash in the group", "GET", "/clusters/member2/apis/apps%2Fv1/deployments", false, 400, nil, ""},
		{"escaped hash in the name", "DELETE", "/clusters/member2/api/v1/namespaces/shop/pods/web%23/../../kube-system/configmaps/c", false, 400, nil, ""},
		{"escaped question mark in the name", "DELETE", "/clusters/member2/api/v1/namespaces/shop/pods/web%3F", false, 400, nil, ""},
		{"escaped dots as the name", "DELETE", "/clusters/member2/api/v1/namespaces/shop/pods/%2E%2E", false, 400, nil, ""},
		{"escaped slash in the subresource", "GET", "/clusters/member2/api/v1/namespaces/shop/pods/web/log%2F..%2Fx", false, 400, nil, ""},
		{"escaped slash in the resource", "GET", "/clusters/member2/api/v1/namespaces/shop/events%2Fx", false, 400, nil, ""},
		{"escaped slash in the cluster", "GET", "/clusters/member2%2Fapi/api/v1/namespaces/shop/events", false, 400, nil, ""},
		{"empty name", "DELETE", "/clusters/member2/api/v1/namespaces//pods", false, 400, nil, ""},
		{"a query that is more than a query", "GET", "/clusters/member2/api/v1/namespaces/shop/events?limit=1;watch=true", false, 400, nil, ""},
		{"deprecated watch prefix", "GET", "/clusters/member2/api/v1/watch/namespaces/kube-system/secrets", false, 400, nil, ""},
		// /api/{word} is discovery of version {word}, and only that is sent.
		{"discovery-shaped", "GET", "/clusters/member2/api/secrets", false, 200, &admitted{"member2", "", schema.GroupResource{}}, "/api/secrets"},
		{"group discovery", "GET", "/clusters/member2/apis/x", false, 200, &admitted{"member2", "", schema.GroupResource{}}, "/apis/x"},
		{"a resource, not discovery", "GET", "/clusters/member2/api/v1/secrets", false, 200, &admitted{"member2", "", schema.GroupResource{Resource: "secrets"}}, "/api/v1/secrets"},
		{"node proxy", "GET", "/clusters/member1/api/v1/nodes/node-a/proxy/run/shop/web/c", false, 501, nil, ""},
		{"pod proxy", "POST", "/clusters/member1/api/v1/namespaces/shop/pods/web/proxy", false, 501, nil, ""},
		{"service proxy", "GET", "/clusters/member1/api/v1/namespaces/shop/services/web/proxy/metrics", false, 501, nil, ""},
		{"service proxy allowed", "GET", "/clusters/member1/api/v1/namespaces/shop/services/web/proxy/metrics", true, 200,
			&admitted{"member1", "shop", schema.GroupResource{Resource: "services"}}, "/api/v1/namespaces/shop/services/web/proxy/metrics"},
		{"fleet-view proxy", "GET", "/api/v1/namespaces/shop/pods/web/proxy", false, 501, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRelay{}
			var audit bytes.Buffer
			var got []admitted
			admit := func(r *http.Request, cluster, ns string, gr schema.GroupResource) (relay.Caller, error) {
				got = append(got, admitted{cluster, ns, gr})
				return relay.Caller{User: "alice"}, nil
			}
			h := New(&fakeQuery{}, fakeCatalog(), nil, nil,
				ActThrough(ActThroughConfig{Relay: fr, Admit: admit, Proxy: tc.proxy, ReadYourWrites: -1, Audit: slog.New(slog.NewJSONHandler(&audit, nil))}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
			if w.Code != tc.code {
				t.Fatalf("answer %d %s, want %d", w.Code, w.Body, tc.code)
			}
			if tc.admit == nil {
				if len(got) != 0 || len(fr.got) != 0 || audit.Len() != 0 {
					t.Fatalf("judged %v, sent %d, audited %s", got, len(fr.got), audit.String())
				}
				return
			}
			if len(got) != 1 || got[0] != *tc.admit {
				t.Fatalf("admission judged %+v, want %+v", got, *tc.admit)
			}
			if len(fr.got) != 1 {
				t.Fatalf("sent %d requests", len(fr.got))
			}
			target := fr.got[0].Target
			if target.Path() != tc.sent || target.Cluster != tc.admit.cluster || target.Namespace != tc.admit.namespace ||
				target.GroupResource() != tc.admit.gr || target.Validate() != nil {
				t.Fatalf("sent %+v (%s)", target, target.Path())
			}
			var line map[string]any
			if err := json.Unmarshal(audit.Bytes(), &line); err != nil {
				t.Fatalf("audit line %q: %v", audit.String(), err)
			}
			if line["path"] != tc.sent || line["namespace"] != tc.admit.namespace || line["resource"] != tc.admit.gr.String() || line["kind"] != string(target.Kind) {
				t.Errorf("audit line %v", line)
			}
		})
	}
}

// TestCachePathCanonical: the cache's own answers read paths by the same
// parser: what the hub would refuse to forward, the cache refuses alike
// (400), with act-through off too.
func TestCachePathCanonical(t *testing.T) {
	for path, code := range map[string]int{
		"/api/v1/namespaces/shop/pods":                  200,
		"/api/v1/namespaces/shop%2F..%2Fother/pods":     400,
		"/api/v1/namespaces/shop/pods/web%252Fx":        400,
		"/api/v1/namespaces/shop/pods/%2E%2E":           400,
		"/api/v1/namespaces/shop/pods/web%23":           400,
		"/clusters/member1/api/v1%2Fnamespaces/x/pods":  400,
		"/api/v1/namespaces//pods":                      400,
		"/api/v1/namespaces/shop/pods/web/status/x":     400,
		"/clusters/member1/healthz":                     404,
		"/clusters/member1/api/v1/namespaces/shop/pods": 200,
	} {
		resp, body := serve(t, &fakeQuery{}, "GET", path, "")
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, body, code)
		}
		if code == 400 && !strings.Contains(string(body), kubepath.ErrMalformed.Error()) {
			t.Errorf("GET %s: %s does not say why", path, body)
		}
	}
}
