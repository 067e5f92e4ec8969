package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// spawner starts every child process from one goroutine locked to its OS
// thread. On Linux Pdeathsig fires when the *thread* that forked the child
// exits, not the process; the Go runtime terminates a thread when a goroutine
// locked to it returns, which could otherwise kill children at random. The
// locked thread lives until the fleet is stopped.
type spawner struct {
	mu     sync.Mutex
	closed bool
	reqs   chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		for r := range s.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("harness: fleet is stopped")
	}
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// close ends the locked thread; call it only once no child is running.
func (s *spawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.reqs)
	}
}

// process is one running child (etcd or kube-apiserver).
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	prefix  *prefixWriter // nil without a LogWriter
	done    chan struct{} // closed once Wait returned
	waitErr error         // valid after done

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts bin with args, output appended to logPath and, when
// logw is not nil, the lines that keep accepts (all if keep is nil) copied to
// logw prefixed with "[name] ".
func startProcess(sp *spawner, name, bin string, args []string, logPath string, logw *syncWriter, keep func([]byte) bool) (*process, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "=== harness: %s starting at %s: %s %s\n", name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = os.Environ()
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: lf, done: make(chan struct{})}
	if logw != nil {
		p.prefix = &prefixWriter{prefix: "[" + name + "] ", w: logw, keep: keep}
		w := io.MultiWriter(lf, p.prefix)
		cmd.Stdout, cmd.Stderr = w, w // same writer: one pipe, one copying goroutine
		cmd.WaitDelay = 5 * time.Second
	} else {
		cmd.Stdout, cmd.Stderr = lf, lf
	}
	if err := sp.start(cmd); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		if p.prefix != nil {
			p.prefix.flush()
		}
		fmt.Fprintf(lf, "=== harness: %s exited at %s: %v\n", name, time.Now().Format(time.RFC3339Nano), p.waitErr)
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then sends
// SIGKILL. An exit caused by these signals is not an error.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		if p.exited() {
			p.stopErr = p.unexpectedExit()
			return
		}
		if p.prefix != nil {
			p.prefix.muted.Store(true) // shutdown chatter stays in the log file
		}
		_ = killGroup(p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(stopGrace):
		}
		_ = killGroup(p.pid(), syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			p.stopErr = fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
		}
	})
	return p.stopErr
}

// unexpectedExit describes an exit that happened without stop being called.
func (p *process) unexpectedExit() error {
	return fmt.Errorf("%s exited unexpectedly (%v); log %s:\n%s", p.name, p.waitErr, p.logPath, p.tail(40))
}

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string { return tailFile(p.logPath, n) }

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	const max = 16 << 10
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	nr, _ := f.ReadAt(buf, off)
	buf = bytes.TrimRight(buf[:nr], "\n")
	lines := strings.Split(string(buf), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// syncWriter serialises writes from several goroutines to one io.Writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) printf(format string, args ...any) {
	if s == nil {
		return
	}
	msg := fmt.Sprintf("harness: "+format, args...)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	_, _ = s.Write([]byte(msg))
}

// prefixWriter copies whole lines to w, each prefixed. exec.Cmd calls Write
// from a single goroutine; flush is called after that goroutine finished.
type prefixWriter struct {
	prefix string
	w      io.Writer
	keep   func(line []byte) bool // nil: every line
	muted  atomic.Bool            // set once the harness stops the process
	buf    []byte
}

// klogLine matches klog's header, e.g. "I1129 10:29:45.682398 ...".
var klogLine = regexp.MustCompile(`^[IWEF]\d{4} `)

// importantLine keeps klog errors (E, F) and every line that is not klog
// output (panics, stack traces, flag errors).
func importantLine(line []byte) bool {
	if !klogLine.Match(line) {
		return true
	}
	return (line[0] == 'E' || line[0] == 'F') && !benign(line)
}

// benign reports log lines that every healthy start-up or test prints.
func benign(line []byte) bool {
	for _, s := range [...]string{
		"The manifest file is empty, ignoring",         // apiserver
		"Found stale data, removed previous endpoints", // apiserver, --endpoint-reconciler-type=none
		`namespaces \"kube-system\" not found`,         // apiserver, before bootstrap
		"Running http and grpc server on single port",  // etcd
		"simple token is not cryptographically signed", // etcd
	} {
		if bytes.Contains(line, []byte(s)) {
			return true
		}
	}
	return false
}

// notBenign keeps every line but benignNoise.
func notBenign(line []byte) bool { return !benign(line) }

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		if !p.muted.Load() && (p.keep == nil || p.keep(p.buf[:i])) {
			line := make([]byte, 0, len(p.prefix)+i+1)
			line = append(append(line, p.prefix...), p.buf[:i+1]...)
			_, _ = p.w.Write(line) // a failing LogWriter must not kill the child
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func (p *prefixWriter) flush() {
	if len(p.buf) > 0 && !p.muted.Load() && (p.keep == nil || p.keep(p.buf)) {
		_, _ = p.w.Write([]byte(p.prefix + string(p.buf) + "\n"))
	}
	p.buf = nil
}
