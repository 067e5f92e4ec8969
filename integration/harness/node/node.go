package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/deploy/image"
	"github.com/fleetview/fleetview/integration/harness"
)

const buildScript = "scripts/build-node.sh"

// nodeBinaries are what scripts/build-node.sh builds.
var nodeBinaries = []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-proxy", "coredns"}

// hostCommands are Debian's: containerd, runc, containernetworking-plugins,
// nftables, iproute2.
var hostCommands = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "ip", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"}

// Options configures Start.
type Options struct {
	// BinDir holds scripts/build-node.sh's binaries; empty: run the script
	// (which builds once, then prints the cached directory).
	BinDir string
	// LogWriter gets start-up progress; nil: none.
	LogWriter io.Writer
	// ReadyTimeout bounds each component's readiness; default 3 minutes.
	ReadyTimeout time.Duration
}

// Node is a running single-node cluster.
type Node struct {
	// Fleet is the control plane's etcd and kube-apiserver; Cluster its one
	// cluster ("node").
	Fleet   *harness.Fleet
	Cluster *harness.Cluster
	// WorkDir holds every state directory and the components' logs (logs/).
	WorkDir string

	binDir      string
	kubeconfig  string
	kubeletPort int
	host        *hostState
	spawner     *spawner
	procs       []*process
	containerd  *process
	logw        io.Writer
	logMu       sync.Mutex
	timeout     time.Duration

	stopOnce sync.Once
	stopErr  error
}

// Start records the host's state and starts the node; it returns once the
// node is Ready, the default ServiceAccount exists and CoreDNS answers. On
// error, everything started is stopped and the host restored.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("node: needs root (containerd, a bridge, nftables)")
	}
	for _, c := range hostCommands {
		if _, err := exec.LookPath(c); err != nil {
			return nil, fmt.Errorf("node: %s is missing (Debian: apt-get install containerd runc containernetworking-plugins nftables iproute2): %w", c, err)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		return nil, fmt.Errorf("node: bridge %s exists: another node runs, or a killed test left it (node.Sweep removes it)", Bridge)
	}
	n := &Node{logw: o.LogWriter, timeout: o.ReadyTimeout, binDir: o.BinDir}
	if n.timeout <= 0 {
		n.timeout = 3 * time.Minute
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if n.binDir == "" {
		n.logf("building or locating the node's binaries via %s", buildScript)
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, buildScript))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("node: %s: %w\n%s", buildScript, err, lastLines(stderr.String(), 30))
		}
		n.binDir = strings.TrimSpace(lastLines(string(out), 1))
	}
	for _, b := range nodeBinaries {
		if _, err := os.Stat(filepath.Join(n.binDir, b)); err != nil {
			return nil, fmt.Errorf("node: BinDir %s: %w", n.binDir, err)
		}
	}
	if n.host, err = recordHost(); err != nil {
		return nil, fmt.Errorf("node: recording the host's state: %w", err)
	}
	if n.WorkDir, err = os.MkdirTemp("", "fleetview-node-"); err != nil {
		return nil, err
	}
	n.spawner = newSpawner()
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	began := time.Now()
	for _, d := range []string{"logs", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "images"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, args := range [][]string{
		{"link", "add", "name", Bridge, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
		// The node reaches Services from the bridge's address (kubectl and
		// the tests through a ClusterIP); the route goes with the bridge.
		{"route", "add", ServiceCIDR, "dev", Bridge, "src", NodeIP},
	} {
		if _, err := run("ip", args...); err != nil {
			return nil, fmt.Errorf("node: bridge: %w", err)
		}
	}
	// Pod -> Service -> pod is routed by the node.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("node: net.ipv4.ip_forward: %w", err)
	}

	if n.Fleet, err = harness.Start(ctx, harness.Options{Clusters: []string{"node"}, WorkDir: n.path("control-plane"), LogWriter: o.LogWriter,
		APIServerArgs: []string{
			"--bind-address=0.0.0.0",
			"--advertise-address=" + NodeIP,
			"--endpoint-reconciler-type=lease",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--disable-admission-plugins=",
			"--allow-privileged=true",
			"--kubelet-preferred-address-types=InternalIP,Hostname",
		}}); err != nil {
		return nil, err
	}
	n.Cluster = n.Fleet.Cluster("node")
	n.kubeconfig = n.path("admin.kubeconfig")
	if err := n.Fleet.WriteKubeconfig(n.kubeconfig, "admin"); err != nil {
		return nil, err
	}

	pause := n.path("images", "pause.tar")
	if err := buildPause(ctx, root, pause); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.ImportImage(ctx, pause); err != nil {
		return nil, err
	}
	if err := makeCgroupRoot(CgroupRoot); err != nil {
		return nil, err
	}
	if err := n.startComponents(ctx); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx); err != nil {
		return nil, err
	}
	n.logf("node ready after %s (work dir %s)", time.Since(began).Round(time.Millisecond), n.WorkDir)
	return n, nil
}

// Kubeconfig is the path of an admin kubeconfig (system:masters).
func (n *Node) Kubeconfig() string { return n.kubeconfig }

// Clientset is the cluster's admin client.
func (n *Node) Clientset() kubernetes.Interface { return n.Cluster.Clientset() }

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.WorkDir}, p...)...) }

func (n *Node) containerdSock() string { return n.path("containerd", "containerd.sock") }

func (n *Node) logf(format string, args ...any) {
	if n.logw == nil {
		return
	}
	n.logMu.Lock()
	defer n.logMu.Unlock()
	fmt.Fprintf(n.logw, "[node] "+format+"\n", args...)
}

// ctr runs containerd's client in the kubelet's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.containerdSock(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage loads an OCI archive (deploy/image's) into containerd, where
// the kubelet finds it (imagePullPolicy IfNotPresent or Never).
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	_, err := n.ctr(ctx, "images", "import", archive)
	return err
}

// Images lists the names of containerd's images.
func (n *Node) Images(ctx context.Context) ([]string, error) {
	out, err := n.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

func buildPause(ctx context.Context, root, out string) error {
	o := image.Options{Dir: root, Package: "./integration/harness/node/pause", Repository: "fleetview.local/pause", Version: "3.10",
		Commit: "pause", Created: time.Unix(0, 0).UTC(), Platforms: []string{"linux/" + runtime.GOARCH}}
	if err := o.Complete(ctx); err != nil {
		return err
	}
	idx, err := image.Build(ctx, o)
	if err != nil {
		return fmt.Errorf("node: pause image: %w", err)
	}
	return image.WriteArchiveFile(out, o.Ref(), idx, o.Created)
}

func (n *Node) startContainerd(ctx context.Context) error {
	cfg := n.path("containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("cni", "net.d", "10-fvnode.conflist"), []byte(cniConfig(n)), 0o644); err != nil {
		return err
	}
	p, err := n.startProcess("containerd", "containerd", []string{"--config", cfg})
	if err != nil {
		return err
	}
	n.containerd = p
	return n.poll(ctx, p, "containerd", func() error { _, err := n.ctr(ctx, "version"); return err })
}

func (n *Node) startComponents(ctx context.Context) error {
	ports, err := freePorts(8)
	if err != nil {
		return err
	}
	n.kubeletPort = ports[0]
	loop := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	files := map[string]string{
		"resolv.conf":     "nameserver " + NodeIP + "\n",
		"kubelet.yaml":    kubeletConfig(n, ports[1]),
		"kube-proxy.yaml": kubeProxyConfig(n, loop(2), loop(3)),
		"Corefile":        corefile(n, loop(4), loop(5)),
	}
	for f, body := range files {
		if err := os.WriteFile(n.path(f), []byte(body), 0o644); err != nil {
			return err
		}
	}
	bin := func(b string) string { return filepath.Join(n.binDir, b) }
	sa := filepath.Join(n.Cluster.Dir, "sa.key")
	ca := filepath.Join(n.Cluster.Dir, "certs", "apiserver.crt")
	starts := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{"--kubeconfig=" + n.kubeconfig, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[6]),
			"--leader-elect=false", "--service-account-private-key-file=" + sa, "--root-ca-file=" + ca, "--use-service-account-credentials=false",
			"--allocate-node-cidrs=false", "--cluster-cidr=" + PodCIDR, "--service-cluster-ip-range=" + ServiceCIDR}},
		{"kube-scheduler", []string{"--kubeconfig=" + n.kubeconfig, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[7]), "--leader-elect=false"}},
		{"coredns", []string{"-conf", n.path("Corefile")}},
		{"kube-proxy", []string{"--config=" + n.path("kube-proxy.yaml")}},
		{"kubelet", []string{"--config=" + n.path("kubelet.yaml"), "--kubeconfig=" + n.kubeconfig, "--hostname-override=" + NodeName,
			"--node-ip=" + NodeIP, "--root-dir=" + n.path("kubelet"), "--cert-dir=" + n.path("kubelet", "pki")}},
	}
	for _, s := range starts {
		if _, err := n.startProcess(s.name, bin(s.name), s.args); err != nil {
			return err
		}
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	get := func(url string) func() error {
		return func() error {
			resp, err := hc.Get(url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			return nil
		}
	}
	for _, w := range []struct {
		name string
		ok   func() error
	}{
		{"coredns", get("http://" + loop(5) + "/ready")},
		{"kube-proxy", get("http://" + loop(2) + "/healthz")},
		{"kubelet", get("http://" + loop(1) + "/healthz")},
	} {
		if err := n.poll(ctx, n.proc(w.name), w.name, w.ok); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) proc(name string) *process {
	for _, p := range n.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// waitReady waits for the node's Ready condition and the default
// ServiceAccount (the controller manager's token and root-CA controllers).
func (n *Node) waitReady(ctx context.Context) error {
	cs := n.Clientset()
	return n.poll(ctx, n.proc("kubelet"), "node Ready", func() error {
		nd, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s not Ready: %v", NodeName, nd.Status.Conditions)
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

// poll retries ok every 250 ms until it succeeds, p exits, or the timeout.
func (n *Node) poll(ctx context.Context, p *process, what string, ok func() error) error {
	deadline := time.Now().Add(n.timeout)
	var last error
	for {
		if last = ok(); last == nil {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%w: %s exited (%v); its log ends:\n%s", ErrNotReady, p.name, p.err, p.tail(40))
		}
		if time.Now().After(deadline) {
			tail := ""
			if p != nil {
				tail = "; its log ends:\n" + p.tail(40)
			}
			return fmt.Errorf("%w: %s after %s: %v%s", ErrNotReady, what, n.timeout, last, tail)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func freePorts(k int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("node: no go.mod above the working directory")
		}
		dir = parent
	}
}

func lastLines(s string, k int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > k {
		ls = ls[len(ls)-k:]
	}
	return strings.Join(ls, "\n")
}
