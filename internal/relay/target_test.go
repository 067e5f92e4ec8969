package relay

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/kubepath"
)

// podTarget is the request for Pod name in namespace default of the test's
// cluster, with the verb method makes.
func podTarget(method, name string) kubepath.Request {
	return kubepath.Request{Cluster: cluster, Kind: kubepath.KindResource, Prefix: "api", Version: "v1", Namespace: "default",
		Resource: "pods", Name: name}.WithVerb(method, nil)
}

func podOpen(method, name string) Open { return Open{Method: method, Target: podTarget(method, name)} }

// short is the last segment of the request's path, as the handlers of
// these tests name what they do.
func short(r *http.Request) string { return "/" + path.Base(r.URL.Path) }

// TestServerChecksTarget: the collector's side refuses, before its
// handler runs, a target that does not validate or does not read back as
// itself, one naming another cluster, a method and query that are another
// verb than the one the target says, and a query that could be more than
// a query; what it serves, its handler sees as the typed request with a
// URL built from it.
func TestServerChecksTarget(t *testing.T) {
	var mu sync.Mutex
	var served []kubepath.Request
	var uris []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tg, ok := TargetFrom(r.Context())
		if !ok {
			t.Error("no target in the handler's context")
		}
		if tg.Name != "ping" {
			served = append(served, tg)
			uris = append(uris, r.URL.RequestURI())
		}
	})
	p := startPair(t, Limits{AcceptTimeout: 5 * time.Second}, ServerLimits{}, h)
	ok := podTarget("GET", "a:b c")
	slash := podTarget("GET", "a/b")
	other := podTarget("GET", "web")
	other.Cluster = "edge-b"
	nsStatus := kubepath.Request{Cluster: cluster, Kind: kubepath.KindResource, Prefix: "api", Version: "v1", Namespace: "shop", Resource: "status", Verb: "list"}
	for _, tc := range []struct {
		name   string
		method string
		target kubepath.Request
		query  string
		refuse string
	}{
		{"escaped name served", "GET", ok, "watch=0", ""},
		{"slash in a name", "GET", slash, "", "may not contain '/'"},
		{"dot-dot name", "GET", podTarget("GET", ".."), "", `may not be ".."`},
		{"another cluster", "GET", other, "", `names cluster "edge-b"`},
		{"verb mismatch", "DELETE", podTarget("GET", "web"), "", `verb "delete"`},
		{"watch by query, list by target", "GET", kubepath.Request{Cluster: cluster, Kind: kubepath.KindResource, Prefix: "api", Version: "v1", Resource: "pods", Verb: "list"}, "watch=yes", `verb "watch"`},
		{"fragment in the query", "GET", podTarget("GET", "web"), "a=b#/../secrets", "may not contain '#'"},
		{"does not read back", "GET", nsStatus, "", "reads back"},
		{"unknown kind", "GET", kubepath.Request{Cluster: cluster, Kind: "exec"}, "", `kind "exec"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			served, uris = nil, nil
			mu.Unlock()
			resp, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Open: Open{Method: tc.method, Target: tc.target, Query: tc.query}, Timeout: 5 * time.Second})
			mu.Lock()
			defer mu.Unlock()
			if tc.refuse != "" {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("got %v, want a refusal saying %q", err, tc.refuse)
				}
				if len(served) != 0 {
					t.Fatalf("the handler served %+v", served)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if len(served) != 1 || !served[0].Equal(tc.target) || uris[0] != "/api/v1/namespaces/default/pods/a:b%20c?watch=0" {
				t.Fatalf("served %+v at %v", served, uris)
			}
		})
	}
}
