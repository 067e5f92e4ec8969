package debugserver

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestServesMetricsAndProfiles(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	cases := []struct {
		name      string
		opts      Options
		pprofCode int
	}{
		{"with profiles", Options{Pprof: true}, http.StatusOK},
		// Exposed for scraping: metrics only.
		{"metrics only", Options{}, http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "fleetview_up 1\n")
			}), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for _, p := range []struct {
				path, want string
				code       int
			}{{"/metrics", "fleetview_up 1", http.StatusOK}, {"/debug/pprof/", "goroutine", tc.pprofCode}} {
				resp, err := c.Get("http://" + s.Addr() + p.path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != p.code || (p.code == http.StatusOK && !strings.Contains(string(b), p.want)) {
					t.Errorf("%s: %d %q, want %d with %q", p.path, resp.StatusCode, b, p.code, p.want)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get("http://" + s.Addr() + "/metrics"); err == nil {
				t.Error("still serving after Close")
			}
		})
	}
	var off *Server
	if err := off.Close(); err != nil {
		t.Errorf("nil server Close: %v", err)
	}
}
