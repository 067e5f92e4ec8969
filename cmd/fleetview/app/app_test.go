package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/queryapi"
)

func TestUpOptionsValidate(t *testing.T) {
	valid := func() UpOptions {
		return UpOptions{ServeOptions: ServeOptions{StateDir: "s", GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"}, Contexts: []string{"member1"}}
	}
	cases := []struct {
		name   string
		mutate func(*UpOptions)
		want   []string
	}{
		{"valid", func(*UpOptions) {}, nil},
		{"no context is the hub mode", func(o *UpOptions) { o.Contexts = nil }, nil},
		{"exposed NATS without a token", func(o *UpOptions) { o.NATSHost = "0.0.0.0" }, []string{"--nats-host 0.0.0.0 is not a loopback"}},
		{"context not a cluster name", func(o *UpOptions) { o.Contexts = []string{"kind-Prod.EU"} }, []string{`--context "kind-Prod.EU"`}},
		{"duplicate context", func(o *UpOptions) { o.Contexts = []string{"a", "a"} }, []string{`--context "a" given twice`}},
		{"metrics on loopback", func(o *UpOptions) { o.MetricsAddr = "localhost:9090" }, nil},
		{"metrics on IPv6 loopback", func(o *UpOptions) { o.MetricsAddr = "[::1]:9090" }, nil},
		// pprof has no authentication: remote only when asked for.
		{"metrics beyond loopback", func(o *UpOptions) { o.MetricsAddr = "10.0.0.1:9090" }, []string{"--metrics-addr 10.0.0.1:9090 is not a loopback address"}},
		{"metrics on every interface", func(o *UpOptions) { o.MetricsAddr = ":9090" }, []string{"--metrics-allow-remote"}},
		{"metrics beyond loopback, allowed", func(o *UpOptions) { o.MetricsAddr, o.MetricsAllowRemote = "0.0.0.0:9090", true }, nil},
		{"metrics address malformed", func(o *UpOptions) { o.MetricsAddr = "9090" }, []string{"--metrics-addr \"9090\""}},
		{"act-through without authentication", func(o *UpOptions) { o.ActThrough = true }, []string{"--act-through needs authentication"}},
		{"act-through rate negative", func(o *UpOptions) { o.ActThroughRate = -1 }, []string{"--act-through-rate -1"}},
		{"act-through timeouts set", func(o *UpOptions) { o.ActThroughIdleTimeout, o.ActThroughAcceptTimeout = 3*time.Second, time.Second }, nil},
		{"act-through idle timeout below a second", func(o *UpOptions) { o.ActThroughIdleTimeout = 500 * time.Millisecond },
			[]string{"--act-through-idle-timeout 500ms must be at least 1s"}},
		{"act-through idle timeout negative", func(o *UpOptions) { o.ActThroughIdleTimeout = -time.Second }, []string{"--act-through-idle-timeout -1s"}},
		{"act-through accept timeout negative", func(o *UpOptions) { o.ActThroughAcceptTimeout = -time.Second }, []string{"--act-through-accept-timeout -1s"}},
		{"act-through-proxy without act-through", func(o *UpOptions) { o.ActThroughProxy = true }, []string{"--act-through-proxy needs --act-through"}},
		{"act-through concurrency set", func(o *UpOptions) {
			o.ActThroughConcurrency = queryapi.RelayLimits{ClusterRequests: 8, ClusterStreams: 6, CallerRequests: 4, CallerStreams: 3}
		}, nil},
		{"act-through concurrency negative", func(o *UpOptions) { o.ActThroughConcurrency.CallerStreams = -1 }, []string{"--act-through-caller-streams -1"}},
		{"act-through streams leave short requests no room", func(o *UpOptions) { o.ActThroughConcurrency.ClusterStreams = 32 },
			[]string{"--act-through-cluster-streams 32 must be below --act-through-cluster-requests 32"}},
		{"act-through one caller takes the cluster", func(o *UpOptions) {
			o.ActThroughConcurrency.ClusterRequests, o.ActThroughConcurrency.ClusterStreams, o.ActThroughConcurrency.CallerStreams = 8, 4, 4
		}, []string{"--act-through-caller-requests 8 must be below --act-through-cluster-requests 8"}},
		{"act-through caller streams above its requests", func(o *UpOptions) { o.ActThroughConcurrency.CallerStreams = 9 },
			[]string{"--act-through-caller-streams 9 must be at most --act-through-caller-requests 8"}},
		{"short resume window", func(o *UpOptions) { o.MaxResumeAge = time.Second }, nil},
		{"negative resume window", func(o *UpOptions) { o.MaxResumeAge = -time.Second }, []string{"--max-resume-age -1s"}},
		{"resume window beyond the tombstone TTL", func(o *UpOptions) { o.MaxResumeAge = 24 * time.Hour }, []string{"--max-resume-age 24h0m0s"}},
		{"everything wrong at once", func(o *UpOptions) {
			o.StateDir, o.GRPCAddr, o.HTTPAddr, o.Contexts = "", "nope", "also-nope", []string{"Bad"}
		}, []string{"--state-dir", "--grpc-addr", "--http-addr", "--context"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.mutate(&o)
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			joined := fmt.Sprint(errs)
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("errors %q do not mention %q", joined, w)
				}
			}
			for _, e := range errs {
				if !errors.Is(e, ErrInvalidOptions) {
					t.Errorf("%v does not wrap ErrInvalidOptions", e)
				}
			}
		})
	}
}

func TestCollectorOptionsValidate(t *testing.T) {
	defaults := func() CollectorOptions {
		var o CollectorOptions
		o.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
		return o
	}
	o := defaults()
	o.Cluster, o.Labels, o.Heartbeat = "Bad_Name", map[string]string{"env": "prod", "bad key!": "x", "k": "bad value!"}, 0
	errs := o.Validate()
	joined := errors.Join(errs...).Error()
	for _, w := range []string{"--cluster", `"bad key!"`, `"bad value!"`, "--heartbeat"} {
		if !strings.Contains(joined, w) {
			t.Errorf("errors %q do not mention %s", joined, w)
		}
	}
	if len(errs) != 4 {
		t.Fatalf("got %d errors, want 4: %v", len(errs), errs)
	}
	ok := defaults()
	ok.Cluster, ok.Labels, ok.Heartbeat = "member1", map[string]string{"env": "prod"}, time.Second
	if errs := ok.Validate(); len(errs) != 0 {
		t.Fatalf("valid options refused: %v", errs)
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u1
  user: {token: abc}
contexts:
- name: member1
  context: {cluster: c1, user: u1}
current-context: member1
`

func TestRestConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := restConfig(path, "member1")
	if err != nil || c.Host != "https://127.0.0.1:1" || c.BearerToken != "abc" {
		t.Fatalf("restConfig = %+v, %v", c, err)
	}
	_, err = restConfig(path, "member9")
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), `context "member9" not found`) {
		t.Fatalf("missing context: %v", err)
	}
	_, err = restConfig(filepath.Join(t.TempDir(), "absent"), "member1")
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("missing kubeconfig file: %v", err)
	}
}

func TestAuthOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		o      AuthOptions
		listen []string
		want   []string
	}{
		{"loopback without auth is fine", AuthOptions{}, []string{"127.0.0.1:80", "localhost:81", "[::1]:82"}, nil},
		{"exposed without auth is refused", AuthOptions{}, []string{"0.0.0.0:8080", "10.1.2.3:7070"}, []string{"0.0.0.0:8080 is not a loopback", "10.1.2.3:7070 is not a loopback"}},
		{"exposed, explicitly unauthenticated", AuthOptions{AllowUnauthenticated: true}, []string{"0.0.0.0:8080"}, nil},
		{"tokens without policy", AuthOptions{TokenFile: f}, nil, []string{"--authorization-policy-file is required"}},
		{"policy without identities", AuthOptions{PolicyFile: f}, nil, []string{"needs --token-auth-file or --client-ca-file"}},
		{"cert without key, CA without cert, missing file", AuthOptions{TLSCertFile: f, ClientCAFile: filepath.Join(dir, "nope"), PolicyFile: f}, nil,
			[]string{"--client-ca-file: stat", "go together"}},
		{"audit log to a file", AuthOptions{AuditLog: filepath.Join(dir, "audit.log")}, nil, nil},
		{"audit log to standard output", AuthOptions{AuditLog: "-"}, nil, nil},
		{"audit log in a missing directory", AuthOptions{AuditLog: filepath.Join(dir, "nope", "audit.log")}, nil, []string{"--audit-log"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.o.Validate(tc.listen...)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %v, want %d errors", errs, len(tc.want))
			}
			joined := fmt.Sprint(errs)
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("%q does not mention %q", joined, w)
				}
			}
		})
	}
}
