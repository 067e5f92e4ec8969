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
	s, err := Start("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "fleetview_up 1\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for path, want := range map[string]string{"/metrics": "fleetview_up 1", "/debug/pprof/": "goroutine"} {
		resp, err := c.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q, want %q", path, resp.StatusCode, b, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get("http://" + s.Addr() + "/metrics"); err == nil {
		t.Error("still serving after Close")
	}
	var off *Server
	if err := off.Close(); err != nil {
		t.Errorf("nil server Close: %v", err)
	}
}
