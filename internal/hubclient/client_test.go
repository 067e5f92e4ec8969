package hubclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestNew: the REST API is at the hub's base; a member context's
// /clusters/<name> is its default cluster.
func TestNew(t *testing.T) {
	for _, tc := range []struct {
		server, base, cluster, err string
	}{
		{"https://hub:8443", "https://hub:8443", "", ""},
		{"https://hub:8443/", "https://hub:8443", "", ""},
		{"https://hub:8443/clusters/prod-eu", "https://hub:8443", "prod-eu", ""},
		{"https://hub/prefix/clusters/a%20b/", "https://hub/prefix", "a b", ""},
		{"https://hub/clusters/a/api", "https://hub/clusters/a/api", "", ""},
		{"hub:8443", "", "", `server "hub:8443"`},
	} {
		c, err := New(&rest.Config{Host: tc.server})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%s: %v, want an ErrInvalidConfig naming %s", tc.server, err, tc.err)
			}
			continue
		}
		if err != nil || c.Base() != tc.base || c.Cluster() != tc.cluster {
			t.Errorf("%s: base %q cluster %q (%v), want %q %q", tc.server, c.Base(), c.Cluster(), err, tc.base, tc.cluster)
		}
	}
}

// TestGetStatus: a Kubernetes Status answer is a StatusError with its
// message; 401 and 403 say what to check.
func TestGetStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := map[string]int{"/ok": 200, "/bad": 400, "/401": 401, "/403": 403, "/text": 500}[r.URL.Path]
		w.WriteHeader(code)
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, `{"a":1}`)
		case "/text":
			fmt.Fprint(w, "boom")
		default:
			fmt.Fprintf(w, `{"kind":"Status","message":"m %d","reason":"R","code":%d}`, code, code)
		}
	}))
	defer srv.Close()
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/ok", ""},
		{"/bad", "GET /bad: m 400"},
		{"/401", "not authenticated (401)"},
		{"/403", "forbidden (403): m 403"},
		{"/text", "GET /text: boom"},
	} {
		var out map[string]int
		err := c.Get(context.Background(), tc.path, nil, &out)
		if tc.want == "" {
			if err != nil || out["a"] != 1 {
				t.Errorf("%s: %v %v", tc.path, out, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrStatus) {
			t.Errorf("%s: %v, want an ErrStatus saying %q", tc.path, err, tc.want)
		}
	}
	srv.Close()
	if err := c.Get(context.Background(), "/ok", nil, &map[string]int{}); !errors.Is(err, ErrUnreachable) {
		t.Errorf("a closed hub: %v, want ErrUnreachable", err)
	}
}
