package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
	"github.com/fleetview/fleetview/integration/harness"
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
	cmd       *exec.Cmd
	exited    chan struct{}
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
	// The harness's addresses: locked machine-wide, so nothing else the
	// machine runs is handed them too.
	var addrs [4]string
	for i := range addrs {
		var err error
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	_, natsPort, err := net.SplitHostPort(addrs[2])
	if err != nil {
		return nil, err
	}
	return &hub{bin: bin, log: filepath.Join(dir, "hub.log"), rest: "http://" + addrs[1], metrics: "http://" + addrs[3], natsURL: "nats://" + addrs[2],
		args: []string{"up", "--state-dir", filepath.Join(dir, "state"), "--grpc-addr", addrs[0], "--http-addr", addrs[1],
			"--nats-host", "127.0.0.1", "--nats-port", natsPort, "--metrics-addr", addrs[3],
			"--token-auth-file", tf, "--authorization-policy-file", pf, "--authorization-mode", "member-rbac"}}, nil
}

// start runs the hub with env added to this process's environment and
// waits until it is ready.
func (h *hub) start(ctx context.Context, env ...string) error {
	f, err := os.OpenFile(h.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	h.cmd = exec.Command(h.bin, h.args...)
	h.cmd.Env = append(os.Environ(), env...)
	h.cmd.Stdout, h.cmd.Stderr = f, f
	h.startedAt = time.Now()
	if err := h.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	h.exited = make(chan struct{})
	go func() { _ = h.cmd.Wait(); f.Close(); close(h.exited) }()
	return waitFor(ctx, 5*time.Minute, "hub ready", func() error {
		select {
		case <-h.exited:
			return fmt.Errorf("%w: the hub exited (log %s)", errStop, h.log)
		default:
		}
		code, body, err := get(ctx, h.rest+"/readyz", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
	})
}

func (h *hub) pid() int { return h.cmd.Process.Pid }

// stop sends SIGTERM and waits for the hub to exit.
func (h *hub) stop() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-h.exited:
		return nil
	case <-time.After(2 * time.Minute):
		_ = h.cmd.Process.Kill()
		return fmt.Errorf("the hub did not stop within 2 minutes of SIGTERM (log %s)", h.log)
	}
}

// collectors are one `fleetview collector` process per member.
type collectors []*exec.Cmd

func startCollectors(dir, bin, kubeconfig, natsURL string, clusters []string) (collectors, error) {
	var cs collectors
	for _, c := range clusters {
		f, err := os.Create(filepath.Join(dir, "collector-"+c+".log"))
		if err != nil {
			cs.stop()
			return nil, err
		}
		cmd := exec.Command(bin, "collector", "--cluster", c, "--kubeconfig", kubeconfig, "--context", c, "--nats-url", natsURL)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			cs.stop()
			return nil, err
		}
		go func() { _ = cmd.Wait(); f.Close() }()
		cs = append(cs, cmd)
	}
	return cs, nil
}

func (cs collectors) stop() {
	for _, cmd := range cs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range cs {
		for range 300 {
			if cmd.Process.Signal(syscall.Signal(0)) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
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

// errStop ends waitFor at once.
var errStop = benchutil.ErrStop

// waitFor polls cond every 50 ms (benchutil.WaitFor).
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	return benchutil.WaitFor(ctx, timeout, 50*time.Millisecond, what, cond)
}
