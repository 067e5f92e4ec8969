package collector

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/relay"
)

func TestParseActClasses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ActClasses
		err  bool
	}{
		{"", ActClasses{}, false},
		{"writes", ActClasses{Writes: true}, false},
		{"writes, logs,reads", ActClasses{Writes: true, Logs: true, Reads: true}, false},
		{"proxy", ActClasses{Proxy: true}, false},
		{"exec", ActClasses{}, true},
	} {
		got, err := ParseActClasses(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseActClasses(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

// TestActThrough: a forwarded request reaches the member (a fake here)
// with the collector's credentials and the caller impersonated, never the
// headers the request brought; classes that are off, and exec, are
// refused before the member is asked.
func TestActThrough(t *testing.T) {
	var got *http.Request
	var gotBody string
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody = r.Clone(context.Background()), string(b)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "x=y")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"kind":"Pod"}`))
	}))
	defer member.Close()
	a, err := NewActThrough(&rest.Config{Host: member.URL + "/prefix", BearerToken: "collector-token"}, ActClasses{Writes: true, Reads: true})
	if err != nil {
		t.Fatal(err)
	}
	caller := relay.Caller{User: "alice", Groups: []string{"dev", "ops"}}
	for _, tc := range []struct {
		name, method, path string
		caller             *relay.Caller
		code               int
		msg                string
	}{
		{"patch as the caller", http.MethodPatch, "/api/v1/namespaces/default/pods/web", &caller, 200, ""},
		{"uncached read", http.MethodGet, "/api/v1/namespaces/default/events", &caller, 200, ""},
		{"logs off", http.MethodGet, "/api/v1/namespaces/default/pods/web/log", &caller, 403, "does not forward logs"},
		{"exec", http.MethodPost, "/api/v1/namespaces/default/pods/web/exec", &caller, 501, "exec, attach and port-forward"},
		{"port-forward", http.MethodPost, "/api/v1/namespaces/default/pods/web/portforward", &caller, 501, "port-forward"},
		{"node proxy", http.MethodGet, "/api/v1/nodes/node-a/proxy/run/default/web/app", &caller, 501, "proxy subresources"},
		{"pod proxy, a write", http.MethodPost, "/api/v1/namespaces/default/pods/web/proxy", &caller, 501, "proxy subresources"},
		{"service proxy", http.MethodGet, "/api/v1/namespaces/default/services/web/proxy/metrics", &caller, 501, "proxy subresources"},
		{"no caller", http.MethodGet, "/api/v1/namespaces", nil, 403, "needs the caller"},
		{"escaped name built escaped", http.MethodGet, "/api/v1/namespaces/default/configmaps/a:b%20c", &caller, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			target, err := kubepath.Parse(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(tc.method, tc.path+"?fieldManager=kubectl", strings.NewReader(`{"metadata":{}}`))
			r = r.WithContext(relay.WithTarget(r.Context(), target.WithVerb(tc.method, r.URL.Query())))
			r.Header.Set("Authorization", "Bearer hub-user-token")
			r.Header.Set("Impersonate-User", "system:admin")
			r.Header.Set("Content-Type", "application/merge-patch+json")
			if tc.caller != nil {
				r = r.WithContext(relay.WithCaller(r.Context(), *tc.caller))
			}
			w := httptest.NewRecorder()
			a.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Fatalf("answer %d %s, want %d with %q", w.Code, w.Body, tc.code, tc.msg)
			}
			if tc.code != 200 {
				if got != nil {
					t.Fatal("a refused request reached the member")
				}
				return
			}
			if w.Header().Get("Set-Cookie") != "" || w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("answer headers %v", w.Header())
			}
			if got.URL.EscapedPath() != "/prefix"+tc.path || got.URL.RawQuery != "fieldManager=kubectl" || got.Method != tc.method {
				t.Errorf("member got %s %s", got.Method, got.URL)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer collector-token" {
				t.Errorf("Authorization = %q, want the collector's", a)
			}
			if u, g := got.Header.Get("Impersonate-User"), got.Header.Values("Impersonate-Group"); u != "alice" || strings.Join(g, ",") != "dev,ops" {
				t.Errorf("impersonated %q %v", u, g)
			}
			if got.Header.Get("Content-Type") != "application/merge-patch+json" || gotBody != `{"metadata":{}}` {
				t.Errorf("body %q of type %q", gotBody, got.Header.Get("Content-Type"))
			}
		})
	}
}

// TestActThroughTarget: the collector builds the member's URL from the
// typed request the hub sent, never from the URL it was handed, and
// refuses (400, the member never asked) a request without one, one that
// does not validate, and one whose method and query are another verb; a
// proxy subresource reaches the member only with the proxy class, the path
// after .../proxy escaped segment by segment.
func TestActThroughTarget(t *testing.T) {
	var got []string
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	}))
	defer member.Close()
	caller := relay.Caller{User: "alice"}
	pod := kubepath.Request{Cluster: "edge-a", Kind: kubepath.KindResource, Prefix: "api", Version: "v1", Namespace: "shop", Resource: "pods", Name: "web"}
	get := pod
	get.Verb = "get"
	slash := get
	slash.Name = "web/../../secrets"
	proxy := get
	proxy.Subresource, proxy.Rest = "proxy", []string{"run", "a b"}
	for _, tc := range []struct {
		name    string
		classes ActClasses
		method  string
		url     string
		target  *kubepath.Request
		code    int
		member  string
	}{
		// The URL handed in says secrets: the target is what counts.
		{"target wins over the URL", ActClasses{Reads: true}, "GET", "/api/v1/namespaces/kube-system/secrets/x?pretty=1", &get, 200, "GET /api/v1/namespaces/shop/pods/web?pretty=1"},
		{"no target", ActClasses{Reads: true}, "GET", "/api/v1/namespaces/shop/pods/web", nil, 400, ""},
		{"slash in the name", ActClasses{Reads: true}, "GET", "/", &slash, 400, ""},
		{"verb mismatch", ActClasses{Reads: true, Writes: true}, "DELETE", "/", &get, 400, ""},
		{"fragment in the query", ActClasses{Reads: true}, "GET", "/?a=%23", &get, 200, "GET /api/v1/namespaces/shop/pods/web?a=%23"},
		{"proxy refused without its class", ActClasses{Reads: true, Writes: true, Logs: true}, "GET", "/", &proxy, 501, ""},
		{"proxy with its class", ActClasses{Proxy: true}, "GET", "/", &proxy, 200, "GET /api/v1/namespaces/shop/pods/web/proxy/run/a%20b?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			a, err := NewActThrough(&rest.Config{Host: member.URL}, tc.classes)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(tc.method, tc.url, nil)
			ctx := relay.WithCaller(r.Context(), caller)
			if tc.target != nil {
				ctx = relay.WithTarget(ctx, *tc.target)
			}
			w := httptest.NewRecorder()
			a.ServeHTTP(w, r.WithContext(ctx))
			if w.Code != tc.code {
				t.Fatalf("answer %d %s, want %d", w.Code, w.Body, tc.code)
			}
			if tc.member == "" && len(got) != 0 || tc.member != "" && (len(got) != 1 || got[0] != tc.member) {
				t.Fatalf("the member got %q, want %q", got, tc.member)
			}
		})
	}
}
