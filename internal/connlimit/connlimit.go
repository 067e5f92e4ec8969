package connlimit

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Limits are the caps of a Limiter. A zero cap is no cap.
type Limits struct {
	// Max is the most connections open at once on every listener of the
	// Limiter.
	Max int
	// PerClient is the most one client address (IP, whatever its port)
	// holds at once; every client behind one proxy shares it.
	PerClient int
	// MaxRefusing is the most refused connections held open at once to
	// answer their refusal; more are closed unanswered. 0:
	// DefaultMaxRefusing.
	MaxRefusing int
	// Linger is how long a refused connection stays open for its answer.
	// 0: DefaultLinger.
	Linger time.Duration
	// MaxFlag and PerClientFlag name the settings in refusals (e.g.
	// "--max-connections"), so a refused client knows what to ask for.
	MaxFlag, PerClientFlag string
}

// Defaults of Limits.
const (
	DefaultMaxRefusing = 64
	DefaultLinger      = 5 * time.Second
)

// Limiter counts the connections of its listeners. One Limiter may serve
// several listeners (the API's HTTP and gRPC ports): the file descriptors
// they use come from one process limit.
type Limiter struct {
	lim Limits

	mu       sync.Mutex
	total    int
	byClient map[string]int
	refusing map[string]error // remote address of each refused connection still open
	refused  Refused
}

// Refused counts refusals since the Limiter was made.
type Refused struct {
	Server, Client uint64
	// Dropped were closed unanswered, MaxRefusing being held already.
	Dropped uint64
}

// New makes a Limiter.
func New(l Limits) *Limiter {
	if l.MaxRefusing <= 0 {
		l.MaxRefusing = DefaultMaxRefusing
	}
	if l.Linger <= 0 {
		l.Linger = DefaultLinger
	}
	if l.MaxFlag == "" {
		l.MaxFlag = "the connection limit"
	}
	if l.PerClientFlag == "" {
		l.PerClientFlag = "the connection limit per client"
	}
	return &Limiter{lim: l, byClient: map[string]int{}, refusing: map[string]error{}}
}

// Listen wraps inner: every connection it accepts is counted, or marked
// refused (Refusal) when over a cap.
func (l *Limiter) Listen(inner net.Listener) net.Listener {
	return &listener{Listener: inner, l: l}
}

// Open is the number of connections counted now (refused ones are not).
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Refusals counts the refusals so far.
func (l *Limiter) Refusals() Refused {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// Refusal is why the connection from remoteAddr (as its RemoteAddr
// prints, i.e. an http.Request's RemoteAddr or a gRPC peer's address) was
// refused; nil when it was not, or is unknown.
func (l *Limiter) Refusal(remoteAddr string) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusing[remoteAddr]
}

// clientOf is the address a per-client cap counts: the IP.
func clientOf(a net.Addr) string {
	s := a.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// admit counts c, or says why it is refused; drop is true when the
// refusal cannot even be answered.
func (l *Limiter) admit(c net.Conn) (release func(), refusal error, drop bool) {
	client, addr := clientOf(c.RemoteAddr()), c.RemoteAddr().String()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lim.Max > 0 && l.total >= l.lim.Max:
		l.refused.Server++
		refusal = fmt.Errorf("%w: the server holds %d connections, its limit (%s); retry later", ErrServerFull, l.total, l.lim.MaxFlag)
	case l.lim.PerClient > 0 && l.byClient[client] >= l.lim.PerClient:
		l.refused.Client++
		refusal = fmt.Errorf("%w: %s holds %d connections, the limit per client (%s); close some or retry later", ErrClientFull, client, l.byClient[client], l.lim.PerClientFlag)
	default:
		l.total++
		l.byClient[client]++
		return func() { l.release(client) }, nil, false
	}
	if len(l.refusing) >= l.lim.MaxRefusing {
		l.refused.Dropped++
		return nil, refusal, true
	}
	l.refusing[addr] = refusal
	return func() { l.forget(addr) }, refusal, false
}

func (l *Limiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client)
	}
}

func (l *Limiter) forget(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.refusing, addr)
}

type listener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next connection, counted or refused; connections
// that cannot be answered are closed here and never returned.
func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, refusal, drop := ln.l.admit(c)
		if drop {
			_ = c.Close()
			continue
		}
		cc := &conn{Conn: c, release: release}
		if refusal != nil {
			// Whatever the client does, a refused connection ends soon.
			cc.timer = time.AfterFunc(ln.l.lim.Linger, func() { _ = cc.Close() })
		}
		return cc, nil
	}
}

// conn gives its place back once, when closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
	timer   *time.Timer
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.release()
	})
	return err
}

// NetConn is the connection beneath.
func (c *conn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes a TCP connection: the HTTP server does so before
// closing one whose request body it did not read, so the client gets the
// answer (a 408, 413 or a refusal) before a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoCloseWrite
}
