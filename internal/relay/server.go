package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// ServerLimits bound the collector's side of the channel.
type ServerLimits struct {
	// ChunkSize and Window are as in Limits (64 KiB, 16).
	ChunkSize int
	Window    int
	// MaxConcurrent bounds the requests served at once (32); beyond it a
	// request is refused at once.
	MaxConcurrent int
	// MaxRequestBytes bounds a request body (3 MiB).
	MaxRequestBytes int64
	// MaxTimeout caps the deadline the hub gives a request (1 h).
	MaxTimeout time.Duration
	// KeepAlive is the period of keep-alive frames while a request is
	// served (IdleTimeout / 3).
	KeepAlive time.Duration
	// IdleTimeout is how long the hub may leave a request without a frame
	// (a body chunk or an acknowledgement) it is waited for (15 s).
	IdleTimeout time.Duration
}

func (l *ServerLimits) setDefaults() {
	if l.ChunkSize <= 0 {
		l.ChunkSize = 64 << 10
	}
	if l.Window <= 0 {
		l.Window = 16
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = 32
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = 3 << 20
	}
	if l.MaxTimeout <= 0 {
		l.MaxTimeout = time.Hour
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 15 * time.Second
	}
	if l.KeepAlive <= 0 {
		l.KeepAlive = l.IdleTimeout / 3
	}
}

// Server serves one cluster's requests with an http.Handler.
type Server struct {
	nc      *nats.Conn
	cluster string
	h       http.Handler
	lim     ServerLimits
	log     *slog.Logger

	mu     sync.Mutex
	active map[string]*exchange
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a server answering cluster's requests received on nc
// (the collector's connection) with h.
func NewServer(nc *nats.Conn, cluster string, h http.Handler, lim ServerLimits, log *slog.Logger) (*Server, error) {
	if err := stream.ValidateCluster(cluster); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	lim.setDefaults()
	return &Server{nc: nc, cluster: cluster, h: h, lim: lim, log: log, active: map[string]*exchange{}}, nil
}

// Run serves until ctx ends, then cancels the requests in flight and
// waits for them.
func (s *Server) Run(ctx context.Context) error {
	sub, err := s.nc.Subscribe(natsnames.ActRequests(s.cluster), s.onFrame)
	if err != nil {
		return fmt.Errorf("relay: subscribe to %s: %w", natsnames.ActRequests(s.cluster), err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	s.mu.Lock()
	s.closed = true
	for _, x := range s.active {
		x.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

type callerKey struct{}

type targetKey struct{}

// WithTarget is ctx carrying the request a served request is (what the
// server gives its handler; for tests of handlers).
func WithTarget(ctx context.Context, t kubepath.Request) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

// TargetFrom is the typed request a served request is, as the hub sent it.
func TargetFrom(ctx context.Context) (kubepath.Request, bool) {
	t, ok := ctx.Value(targetKey{}).(kubepath.Request)
	return t, ok
}

// checkOpen refuses a request the hub could not have meant: a target
// that does not read back as itself, one for another cluster, a method or
// verb that does not match, a query that could be more than a query.
func checkOpen(o *Open, cluster string) error {
	if err := o.Target.Validate(); err != nil {
		return err
	}
	if o.Target.Cluster != cluster {
		return fmt.Errorf("the request names cluster %q, this is %q", o.Target.Cluster, cluster)
	}
	q, err := kubepath.CheckQuery(o.Query)
	if err != nil {
		return err
	}
	if v := kubepath.VerbOf(o.Method, q, o.Target); v == "" || v != o.Target.Verb {
		return fmt.Errorf("method %s with query %q is verb %q, the request says %q", o.Method, o.Query, v, o.Target.Verb)
	}
	return nil
}

// WithCaller is ctx carrying the caller a request acts as (what the server
// gives its handler; for tests of handlers).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller a served request acts as.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// exchange is one request being served.
type exchange struct {
	s      *Server
	id     string
	q      *queue
	credit *credit
	ctx    context.Context
	cancel context.CancelFunc
}

func (x *exchange) respSubject() string { return natsnames.ActResponse(x.s.cluster, x.id) }

func (x *exchange) publish(m *nats.Msg) error { return x.s.nc.PublishMsg(m) }

// onFrame runs on the subscription's goroutine: it never blocks.
func (s *Server) onFrame(m *nats.Msg) {
	id, ok := requestID(s.cluster, m.Subject)
	if !ok {
		return
	}
	s.mu.Lock()
	x := s.active[id]
	s.mu.Unlock()
	switch kind := frameKind(m); {
	case kind == kindOpen && x == nil:
		s.open(id, m.Data)
	case x == nil:
		// A frame of a request already over (a late acknowledgement or
		// chunk, a cancel after the end): nothing to do.
	case kind == kindAck:
		if n, err := frameSeq(m); err == nil {
			x.credit.ack(n)
		}
	case kind == kindCancel:
		x.cancel()
	case kind == kindData || kind == kindEnd:
		x.q.put(m)
	}
}

func (s *Server) refuse(id, why string) {
	_ = s.nc.PublishMsg(frame(natsnames.ActResponse(s.cluster, id), kindError, -1, []byte(why)))
}

func (s *Server) open(id string, data []byte) {
	var o Open
	if err := json.Unmarshal(data, &o); err != nil || o.Method == "" {
		s.refuse(id, "malformed request")
		return
	}
	if err := checkOpen(&o, s.cluster); err != nil {
		s.refuse(id, "malformed request: "+err.Error())
		return
	}
	s.mu.Lock()
	if s.closed || len(s.active) >= s.lim.MaxConcurrent {
		s.mu.Unlock()
		s.refuse(id, fmt.Sprintf("the collector serves %d requests at once", s.lim.MaxConcurrent))
		return
	}
	// The hub's deadline fires first (a grace second later here), so its
	// client hears the timeout, not an answer the deadline cut short.
	timeout := min(timeoutOf(o.TimeoutMillis)+time.Second, s.lim.MaxTimeout)
	if o.TimeoutMillis <= 0 {
		timeout = s.lim.MaxTimeout
	}
	ctx, cancel := context.WithTimeoutCause(WithCaller(context.Background(), o.Caller), timeout,
		fmt.Errorf("%w (%s)", ErrTimeout, timeout))
	x := &exchange{s: s, id: id, q: newQueue(s.lim.Window), credit: newCredit(), ctx: ctx, cancel: cancel}
	s.active[id] = x
	s.wg.Add(1)
	s.mu.Unlock()
	go x.serve(&o)
}

// serve runs the handler for one request and streams its answer.
func (x *exchange) serve(o *Open) {
	s := x.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.active, x.id)
		s.mu.Unlock()
		x.cancel()
	}()
	// Keep-alives from the start: the first tells the hub the request was
	// taken.
	_ = x.publish(frame(x.respSubject(), kindKeep, -1, nil))
	done := make(chan struct{})
	var kwg sync.WaitGroup
	kwg.Add(1)
	go func() {
		defer kwg.Done()
		t := time.NewTicker(keepAlive(s.lim.KeepAlive, o.IdleMillis))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if err := x.publish(frame(x.respSubject(), kindKeep, -1, nil)); err != nil {
				// The connection is closed: the hub can hear nothing
				// more of this request. (A disconnect buffers instead,
				// and the request ends at its deadline at the latest.)
				x.cancel()
			}
		}
	}()
	defer func() {
		close(done)
		kwg.Wait()
	}()

	body := &receiver{ctx: x.ctx, q: x.q, idle: s.lim.IdleTimeout, gone: ErrHubGone, max: s.lim.MaxRequestBytes,
		ack: func(seq int) { _ = x.publish(frame(x.respSubject(), kindAck, seq, nil)) }}
	// The URL is built from the typed request, never parsed from a
	// string; the handler reads the request itself (TargetFrom).
	req, err := http.NewRequestWithContext(WithTarget(x.ctx, o.Target), o.Method, "http://member/", body)
	if err != nil {
		s.refuse(x.id, "malformed request: "+err.Error())
		return
	}
	req.URL = o.Target.URL(&url.URL{Scheme: "http", Host: "member"}, o.Query)
	req.RequestURI = req.URL.RequestURI()
	req.Header = o.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.ContentLength = o.ContentLength
	if o.ContentLength == 0 {
		req.Body = http.NoBody
	}
	w := &responseWriter{x: x, header: http.Header{}, snd: &sender{nc: s.nc, subject: x.respSubject(), chunk: s.lim.ChunkSize,
		window: s.lim.Window, idle: s.lim.IdleTimeout, gone: ErrHubGone, credit: x.credit}}
	if err := x.handle(w, req); err != nil {
		s.refuse(x.id, err.Error())
		return
	}
	if x.ctx.Err() != nil {
		// Cancelled or out of time: whatever the handler made of it is
		// not the member's answer.
		if w.err == nil {
			s.refuse(x.id, context.Cause(x.ctx).Error())
		}
		return
	}
	if w.err != nil {
		// The hub cancelled or stopped reading: nothing more to tell it.
		s.log.Debug("relay: answer cut", "id", x.id, "err", w.err)
		return
	}
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		_ = w.snd.end()
	}
}

// minKeepAlive bounds how often a hub may have keep-alives sent.
const minKeepAlive = 100 * time.Millisecond

// keepAlive is the period of a request's keep-alives: the collector's own,
// or a third of the hub's idle timeout when that is shorter (a hub that
// gives up on a silent collector sooner than the default), not below
// minKeepAlive.
func keepAlive(own time.Duration, hubIdleMillis int64) time.Duration {
	if hubIdleMillis <= 0 || hubIdleMillis/3 >= own.Milliseconds() {
		return own
	}
	return max(time.Duration(hubIdleMillis)*time.Millisecond/3, minKeepAlive)
}

// handle runs the handler; a panic fails the one request.
func (x *exchange) handle(w *responseWriter, req *http.Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				err = fmt.Errorf("the answer was cut")
				return
			}
			x.s.log.Error("relay: handler panicked", "panic", p)
			err = fmt.Errorf("the collector failed serving the request")
		}
	}()
	x.s.h.ServeHTTP(w, req)
	return nil
}

// responseWriter sends the handler's answer as frames.
type responseWriter struct {
	x      *exchange
	header http.Header
	wrote  bool
	snd    *sender
	err    error
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	m, err := jsonFrame(w.x.respSubject(), kindHead, head{Status: code, Header: w.header.Clone()})
	if err == nil {
		err = w.x.publish(m)
	}
	w.err = err
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.err = w.snd.write(w.x.ctx, p); w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush is a no-op: every Write is sent at once.
func (w *responseWriter) Flush() {}
