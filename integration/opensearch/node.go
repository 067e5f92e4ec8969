package opensearch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	launcherClass       = "org.fleetview.opensearch.Launcher"
	buildScript         = "scripts/build-opensearch.sh"
	defaultHeapMB       = 512
	defaultStartTimeout = 3 * time.Minute
	defaultStopTimeout  = 30 * time.Second
	tailBytes           = 16 << 10
	errTailBytes        = 6 << 10
)

// Options configures Start. The zero value is usable.
type Options struct {
	// LauncherDir is a directory made by scripts/build-opensearch.sh
	// (launcher.jar, classpath.txt, optionally launcher.jsa). Empty: run the
	// script, which builds once and then reuses its cache.
	LauncherDir string
	// CacheDir is where the script caches the build (FLEETVIEW_CACHE).
	// Empty: the script's default, $FLEETVIEW_CACHE or ~/.cache/fleetview.
	CacheDir string
	// RepoRoot is the repository holding scripts/build-opensearch.sh. Empty:
	// walk up from the working directory (then from this source file) to the
	// directory with go.mod and the script.
	RepoRoot string
	// Java is the java binary. Empty: $JAVA_HOME/bin/java, else java on PATH.
	// OpenSearch 2.19 wants Java 17 (up to 21).
	Java string
	// HeapMB sets -Xms and -Xmx. Zero: 512.
	HeapMB int
	// HTTPPort is the HTTP port to bind on 127.0.0.1. Zero: a free port.
	HTTPPort int
	// ClusterName is cluster.name. Empty: "fleetview-test".
	ClusterName string
	// Settings are extra node settings (passed as -E key=value), e.g.
	// {"indices.breaker.total.use_real_memory": "false"}.
	Settings map[string]string
	// JVMArgs are extra JVM options, added after the defaults. For short-lived
	// test nodes "-XX:TieredStopAtLevel=1" cuts start time by a third or more,
	// at the cost of slower steady-state code: leave it out for benchmarks.
	JVMArgs []string
	// LogLevel is the launcher's root log4j level (stderr). Empty: WARN.
	LogLevel string
	// LogWriter, if set, receives the build script's and the node's stderr
	// (and any stray stdout). The last 16 KiB are kept regardless, for errors.
	LogWriter io.Writer
	// StartTimeout bounds the JVM start (not the build). Zero: 3 minutes.
	StartTimeout time.Duration
	// StopTimeout is how long Stop (and Halt, Restart) wait after SIGTERM
	// before SIGKILL. Zero: 30 seconds.
	StopTimeout time.Duration
	// DataDir, if set, holds the node's data (path.data) instead of its
	// temporary home, so that the data outlives the JVM: Halt and Restart
	// need it, and a later Start on the same DataDir finds the indices
	// again. The caller owns the directory (e.g. t.TempDir()); Stop leaves
	// it. Empty: the data lives in the home and is deleted with the node.
	DataDir string
}

// Node is a single-node OpenSearch cluster in a child JVM. With
// Options.DataDir the JVM can be halted and started again on the same data
// and HTTP port (Halt, Restart), as a server restart would do.
type Node struct {
	url          string
	port         int
	java         string
	args         []string // JVM and launcher arguments, without --home/--http-port
	logw         io.Writer
	logs         *tailBuffer
	dataDir      string
	startTimeout time.Duration
	stopTimeout  time.Duration

	opMu sync.Mutex // serialises Halt, Restart and Stop
	proc atomic.Pointer[process]
	// halted: the current JVM was stopped on purpose (Halt), so its exit is
	// not an error for Stop.
	halted  bool
	stopped bool
	stopErr error
}

// process is one JVM run of the node, with its own temporary home (the data
// lives in the home unless Options.DataDir is set).
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	home  string

	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // valid after exited is closed
}

// URL is the node's HTTP endpoint, http://127.0.0.1:PORT. It stays the same
// across Restart.
func (n *Node) URL() string { return n.url }

// PID is the current JVM's process id, 0 while the node is halted or
// stopped.
func (n *Node) PID() int {
	if p := n.proc.Load(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// DataDir is Options.DataDir ("" when the data lives in the temporary home).
func (n *Node) DataDir() string { return n.dataDir }

// Logs returns the tail of the node's stderr (all runs of the JVM).
func (n *Node) Logs() string { return n.logs.String() }

// ErrNoDataDir: Halt and Restart keep the node's data, which needs
// Options.DataDir (without it the launcher deletes the data on exit).
var ErrNoDataDir = errors.New("opensearch node: Halt/Restart need Options.DataDir")

// Stop shuts the node down (SIGTERM, then SIGKILL after StopTimeout) and
// removes its temporary home; Options.DataDir, if set, is left to its owner.
// It is safe to call more than once, also after Halt. It reports an error if
// the node had died on its own before Stop, or could not be stopped cleanly.
func (n *Node) Stop() error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.stopped {
		return n.stopErr
	}
	n.stopped = true
	if p := n.proc.Swap(nil); p != nil {
		n.stopErr = n.stopProcess(p, syscall.SIGTERM, !n.halted)
	}
	return n.stopErr
}

// Halt stops the JVM with sig and keeps the data for Restart: SIGTERM is a
// clean shutdown (SIGKILL after StopTimeout), SIGKILL a crash. The HTTP port
// is free afterwards until Restart. It needs Options.DataDir.
func (n *Node) Halt(sig syscall.Signal) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.dataDir == "" {
		return ErrNoDataDir
	}
	if n.stopped {
		return errors.New("opensearch node: Halt after Stop")
	}
	p := n.proc.Swap(nil)
	if p == nil {
		return errors.New("opensearch node: already halted")
	}
	n.halted = true
	return n.stopProcess(p, sig, true)
}

// Restart halts the JVM if it runs (SIGTERM) and starts a new one on the same
// data directory and HTTP port, then waits until the node is ready (cluster
// health yellow: every primary shard recovered). It needs Options.DataDir.
func (n *Node) Restart(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.dataDir == "" {
		return ErrNoDataDir
	}
	if n.stopped {
		return errors.New("opensearch node: Restart after Stop")
	}
	if p := n.proc.Swap(nil); p != nil {
		n.halted = true
		if err := n.stopProcess(p, syscall.SIGTERM, true); err != nil {
			return err
		}
	}
	p, u, err := n.launch(ctx, n.port)
	if err != nil {
		return err
	}
	if u != n.url {
		n.proc.Store(p)
		return fmt.Errorf("opensearch node restarted at %s, not at %s", u, n.url)
	}
	n.halted = false
	n.proc.Store(p)
	return nil
}

// stopProcess signals p, waits for it and removes its home. alive: p is
// expected to be running (its earlier death is reported).
func (n *Node) stopProcess(p *process, sig syscall.Signal, alive bool) error {
	var errs []error
	select {
	case <-p.exited:
		if alive {
			errs = append(errs, fmt.Errorf("opensearch node exited before Stop: %v\n%s", p.waitErr, n.logs.Last(errTailBytes)))
		}
	default:
		_ = p.cmd.Process.Signal(sig)
		timer := time.NewTimer(n.stopTimeout)
		select {
		case <-p.exited:
			timer.Stop()
			if sig == syscall.SIGTERM && !cleanExit(p.waitErr) {
				errs = append(errs, fmt.Errorf("opensearch node stopped with %v\n%s", p.waitErr, n.logs.Last(errTailBytes)))
			}
		case <-timer.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("opensearch node did not stop within %v of %v; killed", n.stopTimeout, sig))
		}
	}
	_ = p.stdin.Close()
	// After SIGTERM the launcher removed its home itself; after SIGKILL it
	// could not.
	if err := os.RemoveAll(p.home); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanExit: 0 (stdin EOF) or 143 (128+SIGTERM, the JVM's exit after its
// shutdown hooks ran).
func cleanExit(err error) bool {
	if err == nil {
		return true
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode() == 143
	}
	return false
}

// StartTest starts a node for a test or benchmark, fails it (tb.Fatal) if the
// node cannot start, and stops the node in tb.Cleanup.
func StartTest(tb testing.TB, opts Options) *Node {
	tb.Helper()
	start := time.Now()
	n, err := Start(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("start opensearch: %v", err)
	}
	tb.Logf("opensearch node at %s (pid %d) ready in %v", n.URL(), n.PID(), time.Since(start).Round(time.Millisecond))
	tb.Cleanup(func() {
		if err := n.Stop(); err != nil {
			tb.Errorf("stop opensearch: %v", err)
		}
	})
	return n
}

// Start builds the launcher if needed, starts a node and waits until it is
// ready (cluster health yellow). ctx bounds the build and the start only;
// cancelling it after Start returned does not stop the node: call Stop.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.HeapMB == 0 {
		opts.HeapMB = defaultHeapMB
	}
	if opts.ClusterName == "" {
		opts.ClusterName = "fleetview-test"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = defaultStopTimeout
	}
	logs := &tailBuffer{max: tailBytes}
	var logw io.Writer = logs
	if opts.LogWriter != nil {
		logw = &lockedWriter{w: io.MultiWriter(logs, opts.LogWriter)}
	}

	java, err := findJava(opts.Java)
	if err != nil {
		return nil, err
	}
	dir := opts.LauncherDir
	if dir == "" {
		dir, err = build(ctx, opts, java, logw)
		if err != nil {
			return nil, err
		}
	}
	cpBytes, err := os.ReadFile(filepath.Join(dir, "classpath.txt"))
	if err != nil {
		return nil, fmt.Errorf("opensearch launcher dir %s: %w", dir, err)
	}
	jar := filepath.Join(dir, "launcher.jar")
	if _, err := os.Stat(jar); err != nil {
		return nil, fmt.Errorf("opensearch launcher dir %s: %w", dir, err)
	}
	// Same classpath string as the build script's CDS run, or the archive
	// is rejected.
	classpath := jar + string(os.PathListSeparator) + strings.TrimSpace(string(cpBytes))
	var dataDir string
	if opts.DataDir != "" {
		if dataDir, err = filepath.Abs(opts.DataDir); err != nil {
			return nil, fmt.Errorf("opensearch DataDir %q: %w", opts.DataDir, err)
		}
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("opensearch DataDir %q: %w", opts.DataDir, err)
		}
	}

	heap := strconv.Itoa(opts.HeapMB) + "m"
	args := []string{
		"-Xms" + heap, "-Xmx" + heap,
		"-Djava.locale.providers=SPI,COMPAT",
		"-Dfile.encoding=UTF-8",
		"-Dlog4j2.disable.jmx=true",
		"-XX:-UsePerfData",
		// JVM warnings (e.g. a stale CDS archive) would go to stdout.
		"-Xlog:disable", "-Xlog:all=warning:stderr:uptime,level,tags",
	}
	if jsa := filepath.Join(dir, "launcher.jsa"); fileExists(jsa) {
		args = append(args, "-Xshare:auto", "-XX:SharedArchiveFile="+jsa)
	}
	args = append(args, opts.JVMArgs...)
	args = append(args, "-cp", classpath, launcherClass,
		"--delete-home", // also when this process dies and stdin closes
		"--cluster-name", opts.ClusterName,
	)
	if opts.LogLevel != "" {
		args = append(args, "--log-level", opts.LogLevel)
	}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-E", k+"="+opts.Settings[k])
	}
	if dataDir != "" {
		// Outside the home, which the launcher deletes when it exits.
		args = append(args, "-E", "path.data="+dataDir)
	}

	n := &Node{
		java:         java,
		args:         args,
		logw:         logw,
		logs:         logs,
		dataDir:      dataDir,
		startTimeout: opts.StartTimeout,
		stopTimeout:  opts.StopTimeout,
	}
	p, u, err := n.launch(ctx, opts.HTTPPort)
	if err != nil {
		return nil, err
	}
	port, err := urlPort(u)
	if err != nil {
		_ = n.stopProcess(p, syscall.SIGKILL, true)
		return nil, err
	}
	n.url, n.port = u, port
	n.proc.Store(p)
	return n, nil
}

func urlPort(u string) (int, error) {
	i := strings.LastIndexByte(u, ':')
	if i < 0 {
		return 0, fmt.Errorf("opensearch launcher printed %q, not a URL with a port", u)
	}
	p, err := strconv.Atoi(strings.TrimRight(u[i+1:], "/"))
	if err != nil {
		return 0, fmt.Errorf("opensearch launcher printed %q, not a URL with a port", u)
	}
	return p, nil
}

// launch starts one JVM with a fresh home on httpPort (0: a free port) and
// waits until it prints its URL.
func (n *Node) launch(ctx context.Context, httpPort int) (*process, string, error) {
	home, err := os.MkdirTemp("", "fleetview-opensearch-")
	if err != nil {
		return nil, "", err
	}
	args := append(append([]string(nil), n.args...), "--home", home, "--http-port", strconv.Itoa(httpPort))

	ready := make(chan string, 1)
	cmd := exec.Command(n.java, args...)
	cmd.Dir = home
	cmd.Stdout = &readyWriter{ready: ready, other: n.logw}
	cmd.Stderr = n.logw
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe() // the launcher exits when this closes
	if err != nil {
		os.RemoveAll(home)
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(home)
		return nil, "", fmt.Errorf("start %s: %w", n.java, err)
	}
	p := &process{cmd: cmd, stdin: stdin, home: home, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	fail := func(format string, a ...any) (*process, string, error) {
		_ = cmd.Process.Kill()
		<-p.exited
		_ = stdin.Close()
		os.RemoveAll(home)
		msg := fmt.Sprintf(format, a...)
		return nil, "", fmt.Errorf("%s\n--- opensearch stderr (tail) ---\n%s", msg, n.logs.Last(errTailBytes))
	}
	timer := time.NewTimer(n.startTimeout)
	defer timer.Stop()
	select {
	case u := <-ready:
		return p, u, nil
	case <-p.exited:
		return fail("opensearch launcher exited before it was ready: %v", p.waitErr)
	case <-timer.C:
		return fail("opensearch launcher not ready within %v", n.startTimeout)
	case <-ctx.Done():
		return fail("opensearch start: %v", ctx.Err())
	}
}
