package opensearch

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

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
