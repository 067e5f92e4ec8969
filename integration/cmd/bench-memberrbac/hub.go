package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// Tokens of the hub's --token-auth-file: root is in system:masters, which
// every member allows anything; alice and bob are bound by the members'
// RBAC objects only. carol has one RoleBinding the change step creates.
const (
	tokens = `root-token,root,1,"system:masters"
alice-token,alice,2
bob-token,bob,3
carol-token,carol,4
`
	// Under member-rbac the policy decides only what is no member's
	// object: registries and the cluster inventory.
	policy = `rules:
- users: [root]
  verbs: ["*", registry-admin]
  resources: ["*", registries, clusters]
`
)

// hub is one `fleetview up --authorization-mode member-rbac` process.
type hub struct {
	bin, log  string
	args      []string
	rest      string // http://host:port of the REST and Kubernetes API
	metrics   string // http://host:port of /metrics and /debug/pprof
	natsURL   string
	proc      *benchutil.Proc
	startedAt time.Time
}

func newHub(dir, bin string) (*hub, error) {
	tf, pf := filepath.Join(dir, "tokens.csv"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tf, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pf, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	a, err := benchutil.NewHubAddrs()
	if err != nil {
		return nil, err
	}
	return &hub{bin: bin, log: filepath.Join(dir, "hub.log"), rest: "http://" + a.HTTP, metrics: "http://" + a.Metrics, natsURL: "nats://" + a.NATS,
		args: []string{"up", "--state-dir", filepath.Join(dir, "state"), "--grpc-addr", a.GRPC, "--http-addr", a.HTTP,
			"--nats-host", "127.0.0.1", "--nats-port", a.NATSPort, "--metrics-addr", a.Metrics,
			"--token-auth-file", tf, "--authorization-policy-file", pf, "--authorization-mode", "member-rbac"}}, nil
}

// start runs the hub with env added to this process's environment and
// waits until it is ready.
func (h *hub) start(ctx context.Context, env ...string) error {
	h.startedAt = time.Now()
	p, err := benchutil.StartProc(h.bin, h.log, env, h.args...)
	if err != nil {
		return err
	}
	h.proc = p
	return waitFor(ctx, 5*time.Minute, "hub ready", func() error {
		if err := h.proc.Alive("hub"); err != nil {
			return err
		}
		return benchutil.Ready(ctx, h.rest)
	})
}

func (h *hub) pid() int { return h.proc.Pid() }

// stop sends SIGTERM and waits for the hub to exit.
func (h *hub) stop() error { return h.proc.Stop(2 * time.Minute) }

// collectors are one `fleetview collector` process per member.
type collectors []*benchutil.Proc

func startCollectors(dir, bin, kubeconfig, natsURL string, clusters []string) (collectors, error) {
	var cs collectors
	for _, c := range clusters {
		p, err := benchutil.StartProc(bin, filepath.Join(dir, "collector-"+c+".log"), nil,
			"collector", "--cluster", c, "--kubeconfig", kubeconfig, "--context", c, "--nats-url", natsURL)
		if err != nil {
			cs.stop()
			return nil, err
		}
		cs = append(cs, p)
	}
	return cs, nil
}

// stop sends every collector SIGTERM, then waits up to 30 s for each.
func (cs collectors) stop() {
	for _, p := range cs {
		_ = p.Terminate()
	}
	for _, p := range cs {
		_ = p.Wait(30 * time.Second)
	}
}

// applyRegistry caches Pods and the four RBAC resources of every member.
func applyRegistry(ctx context.Context, rest string) error {
	sels := []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		sels = append(sels, map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind})
	}
	return benchutil.ApplyRegistry(ctx, rest, "root-token", "pods-and-rbac", sels)
}

// waitFor polls cond every 50 ms (benchutil.WaitFor).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	return benchutil.WaitFor(ctx, timeout, 50*time.Millisecond, what, cond)
}
