package opensearch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	// Zero: 30 seconds.
	StopTimeout time.Duration
}

// Node is a running single-node OpenSearch cluster in a child JVM.
type Node struct {
	url         string
	home        string
	cmd         *exec.Cmd
	stdin       io.WriteCloser
	logs        *tailBuffer
	stopTimeout time.Duration

	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// URL is the node's HTTP endpoint, http://127.0.0.1:PORT.
func (n *Node) URL() string { return n.url }

// PID is the JVM's process id.
func (n *Node) PID() int { return n.cmd.Process.Pid }

// Logs returns the tail of the node's stderr.
func (n *Node) Logs() string { return n.logs.String() }

// Stop shuts the node down (SIGTERM, then SIGKILL after StopTimeout) and
// removes its data directory. It is safe to call more than once. It reports
// an error if the node had died on its own before Stop, or could not be
// stopped cleanly.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var errs []error
	select {
	case <-n.exited:
		errs = append(errs, fmt.Errorf("opensearch node exited before Stop: %v\n%s", n.waitErr, n.logs.Last(errTailBytes)))
	default:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(n.stopTimeout)
		select {
		case <-n.exited:
			timer.Stop()
			if !cleanExit(n.waitErr) {
				errs = append(errs, fmt.Errorf("opensearch node stopped with %v\n%s", n.waitErr, n.logs.Last(errTailBytes)))
			}
		case <-timer.C:
			_ = n.cmd.Process.Kill()
			<-n.exited
			errs = append(errs, fmt.Errorf("opensearch node did not stop within %v of SIGTERM; killed", n.stopTimeout))
		}
	}
	_ = n.stdin.Close()
	if err := os.RemoveAll(n.home); err != nil {
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

	home, err := os.MkdirTemp("", "fleetview-opensearch-")
	if err != nil {
		return nil, err
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
		"--home", home,
		"--delete-home", // also when this process dies and stdin closes
		"--http-port", strconv.Itoa(opts.HTTPPort),
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

	ready := make(chan string, 1)
	cmd := exec.Command(java, args...)
	cmd.Dir = home
	cmd.Stdout = &readyWriter{ready: ready, other: logw}
	cmd.Stderr = logw
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe() // the launcher exits when this closes
	if err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(home)
		return nil, fmt.Errorf("start %s: %w", java, err)
	}
	n := &Node{
		home:        home,
		cmd:         cmd,
		stdin:       stdin,
		logs:        logs,
		stopTimeout: opts.StopTimeout,
		exited:      make(chan struct{}),
	}
	go func() {
		n.waitErr = cmd.Wait()
		close(n.exited)
	}()

	fail := func(format string, a ...any) (*Node, error) {
		_ = cmd.Process.Kill()
		<-n.exited
		_ = stdin.Close()
		os.RemoveAll(home)
		msg := fmt.Sprintf(format, a...)
		return nil, fmt.Errorf("%s\n--- opensearch stderr (tail) ---\n%s", msg, logs.Last(errTailBytes))
	}
	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	select {
	case u := <-ready:
		n.url = u
		return n, nil
	case <-n.exited:
		return fail("opensearch launcher exited before it was ready: %v", n.waitErr)
	case <-timer.C:
		return fail("opensearch launcher not ready within %v", opts.StartTimeout)
	case <-ctx.Done():
		return fail("opensearch start: %v", ctx.Err())
	}
}

// build runs scripts/build-opensearch.sh and returns the directory it prints.
func build(ctx context.Context, opts Options, java string, logw io.Writer) (string, error) {
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = findRepoRoot(); err != nil {
			return "", err
		}
	}
	script := filepath.Join(root, buildScript)
	bash, err := exec.LookPath("bash")
	if err != nil {
		return "", fmt.Errorf("bash is needed to run %s: %w", script, err)
	}
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: tailBytes}
	cmd := exec.CommandContext(ctx, bash, script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FLEETVIEW_JAVA="+java)
	if opts.CacheDir != "" {
		cmd.Env = append(cmd.Env, "FLEETVIEW_CACHE="+opts.CacheDir)
	}
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(stderr, logw)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.Last(errTailBytes))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" || !fileExists(filepath.Join(dir, "classpath.txt")) {
		return "", fmt.Errorf("%s printed %q, not a launcher directory\n%s", script, stdout.String(), stderr.Last(errTailBytes))
	}
	return dir, nil
}

func findJava(java string) (string, error) {
	if java == "" {
		if jh := os.Getenv("JAVA_HOME"); jh != "" {
			java = filepath.Join(jh, "bin", "java")
		} else {
			java = "java"
		}
	}
	p, err := exec.LookPath(java)
	if err != nil {
		return "", fmt.Errorf("java (17) is needed for the OpenSearch test node: %w", err)
	}
	return p, nil
}

func findRepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			if fileExists(filepath.Join(d, "go.mod")) && fileExists(filepath.Join(d, buildScript)) {
				return d, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("cannot find the repository root (go.mod with %s) above %v; set Options.RepoRoot or Options.LauncherDir", buildScript, starts)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readyWriter takes the launcher's stdout: the first "ready URL" line goes to
// ready, anything else to other.
type readyWriter struct {
	ready chan<- string
	other io.Writer
	buf   []byte
	sent  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i+1])
		w.buf = w.buf[i+1:]
		if url, ok := strings.CutPrefix(strings.TrimSpace(line), "ready "); ok && !w.sent {
			w.sent = true
			w.ready <- url
			continue
		}
		_, _ = io.WriteString(w.other, line)
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return t.Last(t.max) }

// Last returns up to n trailing bytes, starting at a line boundary if it can.
func (t *tailBuffer) Last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// lockedWriter serialises writes from the stdout and stderr copiers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
