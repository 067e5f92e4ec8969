package opensearch

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleetview/fleetview/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// A TLS endpoint standing in for OpenSearch (unit test of the transport
// options; the real server is exercised by the integration tests).
func tlsServer(t *testing.T, user, pass string) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); user != "" && (!ok || u != user || p != pass) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"found":true,"_source":{"cluster":"c1","seq":42}}`))
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

func TestTLSAndAuth(t *testing.T) {
	srv, ca := tlsServer(t, "admin", "s3cret")
	for _, tc := range []struct {
		name string
		opts Options
		err  string
	}{
		{"CA file and credentials", Options{CAFile: ca, Username: "admin", Password: "s3cret"}, ""},
		{"insecure skip verify", Options{InsecureSkipVerify: true, Username: "admin", Password: "s3cret"}, ""},
		{"untrusted certificate", Options{Username: "admin", Password: "s3cret"}, "certificate"},
		{"wrong password", Options{CAFile: ca, Username: "admin", Password: "nope"}, "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Addresses = []string{srv.URL}
			s, err := Open(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			seq, err := s.Checkpoint(ctx, "c1")
			if tc.err == "" {
				if err != nil || seq != 42 {
					t.Fatalf("checkpoint = %d, %v", seq, err)
				}
				return
			}
			// Certificate errors are retried (the server may be starting)
			// until the context ends; a 401 is final.
			if err == nil || (!strings.Contains(err.Error(), tc.err) && !strings.Contains(err.Error(), "deadline")) {
				t.Fatalf("error %v, want one about %s", err, tc.err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	_, err := Open(Options{Addresses: []string{"ftp://x", "http://"}, CAFile: "/nonexistent.pem", Username: "u", Replicas: -1, ReadRetry: -time.Second})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`"ftp://x"`, `"http://"`, "/nonexistent.pem", "username and password", "replicas -1", "read retry -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s: %v", want, err)
		}
	}
	if _, err := Open(Options{}); err == nil || !strings.Contains(err.Error(), "at least one address") {
		t.Errorf("no addresses: %v", err)
	}
}

// TestPingPassesOverADeadNode: a cluster that lost one node answers the
// health probe through another address, every time, and red is an error.
func TestPingPassesOverADeadNode(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused from now on
	cases := []struct {
		status  string
		wantErr bool
	}{{"yellow", false}, {"green", false}, {"red", true}}
	for _, tc := range cases {
		t.Run(tc.status, func(t *testing.T) {
			live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(`{"status":"` + tc.status + `"}`))
			}))
			defer live.Close()
			s, err := Open(Options{Addresses: []string{deadURL, live.URL}, Username: "u", Password: "p"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 4 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := s.Ping(ctx)
				cancel()
				if (err != nil) != tc.wantErr {
					t.Fatalf("ping %d: %v, want error %v", i, err, tc.wantErr)
				}
			}
		})
	}
}

// OpenSearch is a store the backend set can hold.
var _ store.Backend = (*Store)(nil)
