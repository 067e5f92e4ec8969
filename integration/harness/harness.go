package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Options configures Start.
type Options struct {
	// Clusters names the member clusters, one kube-apiserver each. Names are
	// DNS labels ([a-z0-9-]); each is the etcd prefix (/<name>), the
	// directory under WorkDir and the kubeconfig context name.
	Clusters []string
	// BinDir holds kube-apiserver and etcd. Empty: run scripts/build-k8s.sh
	// (see BuildBinaries) and use the directory it prints.
	BinDir string
	// WorkDir holds etcd's data, certificates, keys, token files and logs.
	// Empty: a temporary directory, removed by Fleet.Stop.
	WorkDir string
	// LogWriter, when not nil, receives harness progress messages, the build
	// script's output, etcd's output (level warn and up) and the
	// apiservers' error lines (all lines with Verbose), each prefixed
	// "[etcd] " or "[<cluster>] ". The full logs are always written to
	// WorkDir/etcd/etcd.log and WorkDir/<cluster>/kube-apiserver.log, and a
	// start-up failure's error carries the tail of the failing log.
	LogWriter io.Writer
	// Verbose copies every apiserver log line to LogWriter (about 170 lines
	// per start-up at the default verbosity), not only errors. Output after
	// the harness sent SIGTERM, and a few lines every healthy start-up
	// prints, are never copied.
	Verbose bool

	// ReadyTimeout bounds the wait for each process's readiness. Default 120 s.
	ReadyTimeout time.Duration
	// APIServerArgs are appended to every kube-apiserver's flags (a flag
	// given again overrides the harness's value; an --authorization-mode or
	// --disable-admission-plugins here or in ClusterAPIServerArgs replaces
	// the harness's RBAC or ServiceAccount, since kube-apiserver appends a
	// repeated list flag).
	APIServerArgs []string
	// ClusterAPIServerArgs are appended, after APIServerArgs, to the named
	// cluster's kube-apiserver flags only (a member with a webhook
	// authorizer beside members without).
	ClusterAPIServerArgs map[string][]string
	// EtcdArgs are appended to etcd's flags.
	EtcdArgs []string
}

const defaultReadyTimeout = 120 * time.Second

var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Fleet is a running etcd with one kube-apiserver per member cluster.
type Fleet struct {
	binDir        string
	workDir       string
	removeWorkDir bool
	logw          *syncWriter // nil without Options.LogWriter
	readyTimeout  time.Duration
	apiserverArgs []string
	clusterArgs   map[string][]string
	apiserverKeep func([]byte) bool // filter for apiserver lines to logw
	spawner       *spawner

	etcd     *process
	etcdURL  string
	clusters []*Cluster

	stopOnce sync.Once
	stopErr  error
}

// Start builds (if needed) and starts one etcd and one kube-apiserver per
// cluster name, and returns once every apiserver's /readyz answers ok. ctx
// bounds start-up only; the processes run until Fleet.Stop (or until this
// process dies). On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *Fleet, err error) {
	if len(opts.Clusters) == 0 {
		return nil, errors.New("harness: Options.Clusters is empty")
	}
	seen := map[string]bool{}
	for _, n := range opts.Clusters {
		if !clusterNameRE.MatchString(n) || len(n) > 63 || n == "etcd" {
			return nil, fmt.Errorf("harness: invalid cluster name %q (want a DNS label, not \"etcd\")", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("harness: duplicate cluster name %q", n)
		}
		seen[n] = true
	}
	for n := range opts.ClusterAPIServerArgs {
		if !seen[n] {
			return nil, fmt.Errorf("harness: ClusterAPIServerArgs names %q, not in Options.Clusters", n)
		}
	}

	f := &Fleet{readyTimeout: opts.ReadyTimeout, apiserverArgs: opts.APIServerArgs, clusterArgs: opts.ClusterAPIServerArgs, apiserverKeep: importantLine}
	if opts.Verbose {
		f.apiserverKeep = notBenign
	}
	if f.readyTimeout <= 0 {
		f.readyTimeout = defaultReadyTimeout
	}
	if opts.LogWriter != nil {
		f.logw = &syncWriter{w: opts.LogWriter}
	}

	f.binDir = opts.BinDir
	if f.binDir == "" {
		var bw io.Writer
		if f.logw != nil {
			bw = &prefixWriter{prefix: "[build-k8s] ", w: f.logw}
		}
		f.logw.printf("building or locating kube-apiserver and etcd via %s", buildScript)
		if f.binDir, err = BuildBinaries(ctx, bw); err != nil {
			return nil, err
		}
	} else if err := checkBinaries(f.binDir); err != nil {
		return nil, fmt.Errorf("harness: BinDir: %w", err)
	}
	if f.binDir, err = filepath.Abs(f.binDir); err != nil {
		return nil, err
	}

	if opts.WorkDir == "" {
		if f.workDir, err = os.MkdirTemp("", "fleetview-harness-"); err != nil {
			return nil, err
		}
		f.removeWorkDir = true
	} else {
		if f.workDir, err = filepath.Abs(opts.WorkDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(f.workDir, 0o755); err != nil {
			return nil, err
		}
	}

	f.spawner = newSpawner()
	defer func() {
		if err != nil {
			if serr := f.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("cleanup: %w", serr))
			}
		}
	}()

	began := time.Now()
	if err := f.startEtcd(ctx, opts.EtcdArgs); err != nil {
		return nil, err
	}
	f.logw.printf("etcd ready at %s after %s", f.etcdURL, time.Since(began).Round(time.Millisecond))

	for _, name := range opts.Clusters {
		c, err := newCluster(f, name)
		if err != nil {
			return nil, err
		}
		f.clusters = append(f.clusters, c)
	}
	errs := make([]error, len(f.clusters))
	var wg sync.WaitGroup
	for i, c := range f.clusters {
		wg.Go(func() {
			errs[i] = c.launch(ctx, true)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f.logw.printf("%d cluster(s) ready after %s (work dir %s)", len(f.clusters), time.Since(began).Round(time.Millisecond), f.workDir)
	return f, nil
}

// Clusters returns the member clusters in the order of Options.Clusters.
func (f *Fleet) Clusters() []*Cluster { return append([]*Cluster(nil), f.clusters...) }

// Cluster returns the member cluster with the given name, or nil.
func (f *Fleet) Cluster(name string) *Cluster {
	for _, c := range f.clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// EtcdPID returns etcd's process id, or 0 once it stopped.
func (f *Fleet) EtcdPID() int {
	if f.etcd == nil || f.etcd.exited() {
		return 0
	}
	return f.etcd.pid()
}

// EtcdURL is the client URL of the fleet's etcd (http://127.0.0.1:PORT).
func (f *Fleet) EtcdURL() string { return f.etcdURL }

// WorkDir is the directory holding data, certificates and logs.
func (f *Fleet) WorkDir() string { return f.workDir }

// BinDir is the directory holding kube-apiserver and etcd.
func (f *Fleet) BinDir() string { return f.binDir }

// Stop stops every apiserver (concurrently), then etcd: SIGTERM, then SIGKILL
// after 10 s. It removes the work directory if Start created it. It is safe
// to call more than once; later calls return the first call's result.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() {
		errs := make([]error, len(f.clusters))
		var wg sync.WaitGroup
		for i, c := range f.clusters {
			wg.Go(func() { errs[i] = c.Stop() })
		}
		wg.Wait()
		if f.etcd != nil {
			errs = append(errs, f.etcd.stop())
		}
		if f.spawner != nil {
			f.spawner.close()
		}
		if f.removeWorkDir && f.workDir != "" {
			errs = append(errs, os.RemoveAll(f.workDir))
		}
		f.stopErr = errors.Join(errs...)
		f.logw.printf("fleet stopped")
	})
	return f.stopErr
}

func (f *Fleet) startEtcd(ctx context.Context, extra []string) error {
	dir := filepath.Join(f.workDir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		args := []string{
			"--name=fleetview",
			"--data-dir=" + filepath.Join(dir, "data"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=fleetview=" + peer,
			"--unsafe-no-fsync",                // test data: durability not needed, much faster
			"--quota-backend-bytes=8589934592", // 8 GiB: room for 100k-Pod tests
			"--log-level=warn",
		}
		args = append(args, extra...)
		p, err := startProcess(f.spawner, "etcd", filepath.Join(f.binDir, "etcd"), args, filepath.Join(dir, "etcd.log"), f.logw, notBenign)
		if err != nil {
			return err
		}
		f.etcd, f.etcdURL = p, client
		err = waitReady(ctx, p, f.readyTimeout, &http.Client{Timeout: 2 * time.Second}, client+"/health", "", func(status int, body string) bool {
			return status == http.StatusOK && strings.Contains(body, `"health":"true"`)
		})
		if err == nil {
			return nil
		}
		lastErr = err
		_ = p.stop()
		f.etcd = nil
		if !p.exited() || !strings.Contains(p.tail(60), "address already in use") {
			break
		}
		f.logw.printf("etcd: port taken, retrying")
	}
	return lastErr
}

// freePorts returns n distinct ports that were free on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := listenFree()
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreeAddr is a 127.0.0.1 address whose port was free a moment ago, for a
// process to listen on. The port is below the kernel's ephemeral range:
// one picked by listening on port 0 comes from that range, and every
// outgoing connection made before the process listens may take it (in
// CI, three hubs dialling each other's NATS routes took one's metrics
// port).
func FreeAddr() (string, error) {
	l, err := listenFree()
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// listenFree listens on a random free port of 127.0.0.1 below the
// ephemeral range.
func listenFree() (net.Listener, error) {
	low := ephemeralLow()
	var err error
	for range 200 {
		port := fixedPortsFrom + rand.IntN(low-fixedPortsFrom)
		ok, terr := handedOut.take(port)
		if terr != nil {
			return nil, fmt.Errorf("reserve port %d: %w", port, terr)
		}
		if !ok {
			continue
		}
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no free port in %d-%d: %w", fixedPortsFrom, low-1, err)
}

// portSet remembers every port listenFree handed out in this test
// process, and holds a lock on it shared with every other test process
// of this machine. A port is free again the moment FreeAddr closes its
// probe, so without it two calls could return the same port: CI saw a
// cluster of three hubs, picking 15 ports between them, give one port to
// two listeners ("bind: address already in use" from the third hub). The
// lock (an flock on a file named for the port, under
// $TMPDIR/fleetview-ports) does the same for test processes running at
// once (go test -p 2 runs two integration packages side by side): a port
// one process handed out is never handed out by another while the first
// lives. The kernel drops the lock when the process ends, however it ends.
type portSet struct {
	mu    sync.Mutex
	ports map[int]*os.File // nil: refused (another process holds it)
}

// take reports whether port was not handed out before, by this process
// or by another running test process, and marks it. An error is one the
// lock itself failed with (an unwritable temporary directory).
func (s *portSet) take(port int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.ports[port]; seen {
		return false, nil
	}
	if s.ports == nil {
		s.ports = map[int]*os.File{}
	}
	f, err := lockPort(port)
	if err != nil && !errors.Is(err, ErrPortTaken) {
		return false, err
	}
	s.ports[port] = f // a refused port is not tried again in this process
	return err == nil, nil
}

// handedOut is process-wide because ports are: every test in the process
// picks from the same loopback range.
var handedOut portSet

// fixedPortsFrom is the lowest port listenFree picks: above the ports
// services usually take.
const fixedPortsFrom = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= fixedPortsFrom+1000 {
		return 32768
	}
	return low
}

// waitReady polls url until ok accepts the answer, the process exits, the
// timeout passes or ctx ends. Errors carry the tail of the process's log.
// The pause between polls starts at 20 ms and doubles up to 250 ms: etcd
// is ready in a few hundred milliseconds, and each of the suite's
// hundreds of process starts waited on average half a fixed 250 ms
// pause past its readiness.
func waitReady(ctx context.Context, p *process, timeout time.Duration, hc *http.Client, url, token string, ok func(status int, body string) bool) error {
	deadline := time.Now().Add(timeout)
	pause := 20 * time.Millisecond
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if ok(resp.StatusCode, string(body)) {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, lastLines(strings.TrimSpace(string(body)), 15))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("harness: %s exited before it was ready (%v); log %s:\n%s", p.name, p.waitErr, p.logPath, p.tail(40))
		case <-ctx.Done():
			return fmt.Errorf("harness: %s not ready: %w (last answer from %s: %s); log %s:\n%s", p.name, ctx.Err(), url, last, p.logPath, p.tail(40))
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: %s not ready after %s (last answer from %s: %s); log %s:\n%s", p.name, timeout, url, last, p.logPath, p.tail(40))
		}
	}
}
