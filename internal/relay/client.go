package relay

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// The hub's default wait for a collector to take a request and for its
// next frame once it did (its keep-alives come a third of the latter
// apart).
const (
	DefaultAcceptTimeout = 5 * time.Second
	DefaultIdleTimeout   = 15 * time.Second
)

// Limits bound the hub's side of the channel.
type Limits struct {
	// ChunkSize is the largest body chunk sent in one frame (64 KiB).
	ChunkSize int
	// Window is how many chunks may be unacknowledged (16).
	Window int
	// MaxRequestBytes bounds a request body (3 MiB, kube-apiserver's own
	// limit on a write).
	MaxRequestBytes int64
	// MaxResponseBytes bounds an answer's body (256 MiB; a followed log
	// or a watch is bounded by its time instead when this is negative).
	MaxResponseBytes int64
	// AcceptTimeout is how long the collector has to take a request (5 s).
	AcceptTimeout time.Duration
	// IdleTimeout is how long a request may go without any frame from the
	// collector, keep-alives included, before it is ErrCollectorGone (15 s).
	IdleTimeout time.Duration
	// PerCluster bounds the requests in flight to one cluster (32).
	PerCluster int
}

func (l *Limits) setDefaults() {
	if l.ChunkSize <= 0 {
		l.ChunkSize = 64 << 10
	}
	if l.Window <= 0 {
		l.Window = 16
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = 3 << 20
	}
	if l.MaxResponseBytes == 0 {
		l.MaxResponseBytes = 256 << 20
	}
	if l.AcceptTimeout <= 0 {
		l.AcceptTimeout = DefaultAcceptTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.PerCluster <= 0 {
		l.PerCluster = 32
	}
}

// Client sends requests to the collectors. It is safe for concurrent use.
type Client struct {
	nc  *nats.Conn
	lim Limits

	mu       sync.Mutex
	inflight map[string]int
}

// NewClient returns a client sending over nc (the hub's connection).
func NewClient(nc *nats.Conn, lim Limits) *Client {
	lim.setDefaults()
	return &Client{nc: nc, lim: lim, inflight: map[string]int{}}
}

// Request is one request for a cluster's collector.
type Request struct {
	Cluster string
	Open
	// Body is the request body (nil: none). It is read until EOF while
	// the answer is awaited; it must not outlive the request.
	Body io.Reader
	// Timeout bounds the whole request, the answer's body included.
	Timeout time.Duration
}

// Response is the collector's answer. Its Body must be closed.
type Response struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
}

func (c *Client) acquire(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[cluster] >= c.lim.PerCluster {
		return false
	}
	c.inflight[cluster]++
	return true
}

func (c *Client) release(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[cluster]--; c.inflight[cluster] <= 0 {
		delete(c.inflight, cluster)
	}
}

// Do sends req and returns the answer's head once the collector sent it,
// with the body streaming behind it. Errors before the head: ErrBusy,
// ErrNoCollector, ErrCollectorGone, ErrRefused, ErrTooLarge, ErrTimeout, or
// the context's.
func (c *Client) Do(ctx context.Context, req *Request) (*Response, error) {
	if err := stream.ValidateCluster(req.Cluster); err != nil {
		return nil, err
	}
	if req.Timeout <= 0 {
		return nil, fmt.Errorf("relay: a request needs a timeout")
	}
	if !c.acquire(req.Cluster) {
		return nil, fmt.Errorf("%w (%d)", ErrBusy, c.lim.PerCluster)
	}
	x := &call{c: c, cluster: req.Cluster, id: rand.Text(), q: newQueue(c.lim.Window), credit: newCredit()}
	ctx, x.cancelCause = context.WithCancelCause(ctx)
	ctx, x.cancelTimeout = context.WithTimeoutCause(ctx, req.Timeout, fmt.Errorf("%w (%s)", ErrTimeout, req.Timeout))
	x.ctx = ctx
	sub, err := c.nc.Subscribe(natsnames.ActResponse(req.Cluster, x.id), x.onFrame)
	if err != nil {
		x.close()
		return nil, err
	}
	x.sub = sub
	open := req.Open
	open.TimeoutMillis = req.Timeout.Milliseconds()
	open.IdleMillis = c.lim.IdleTimeout.Milliseconds()
	m, err := jsonFrame(x.reqSubject(), kindOpen, open)
	if err == nil {
		err = c.nc.PublishMsg(m)
	}
	if err != nil {
		x.close()
		return nil, err
	}
	snd := &sender{nc: c.nc, subject: x.reqSubject(), chunk: c.lim.ChunkSize, window: c.lim.Window,
		max: c.lim.MaxRequestBytes, idle: c.lim.IdleTimeout, gone: ErrCollectorGone, credit: x.credit}
	if req.Body == nil {
		err = snd.end()
	} else {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			if err := snd.copyFrom(ctx, req.Body); err != nil {
				x.cancelCause(err)
			}
		}()
	}
	if err == nil {
		var h *head
		if h, err = x.awaitHead(); err == nil {
			body := &receiver{ctx: ctx, q: x.q, ack: x.ack, idle: c.lim.IdleTimeout, gone: ErrCollectorGone, max: c.lim.MaxResponseBytes}
			x.body = body
			return &Response{Status: h.Status, Header: h.Header, Body: x}, nil
		}
	}
	x.close()
	return nil, err
}

// call is one request in flight; it is the answer's body too.
type call struct {
	c             *Client
	cluster, id   string
	ctx           context.Context
	cancelCause   context.CancelCauseFunc
	cancelTimeout context.CancelFunc
	sub           *nats.Subscription
	q             *queue
	credit        *credit
	body          *receiver
	wg            sync.WaitGroup
	once          sync.Once
}

func (x *call) reqSubject() string { return natsnames.ActRequest(x.cluster, x.id) }

func (x *call) onFrame(m *nats.Msg) {
	if frameKind(m) == kindAck {
		if n, err := frameSeq(m); err == nil {
			x.credit.ack(n)
		}
		return
	}
	x.q.put(m)
}

func (x *call) ack(seq int) { _ = x.c.nc.PublishMsg(frame(x.reqSubject(), kindAck, seq, nil)) }

// awaitHead waits for the status and headers: the collector's first frame
// (a keep-alive when it takes the request) within AcceptTimeout, then
// frames at most IdleTimeout apart.
func (x *call) awaitHead() (*head, error) {
	wait, gone := x.c.lim.AcceptTimeout, ErrNoCollector
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case m := <-x.q.ch:
			switch frameKind(m) {
			case kindKeep:
				wait, gone = x.c.lim.IdleTimeout, ErrCollectorGone
				if !t.Stop() {
					<-t.C
				}
				t.Reset(wait)
			case kindError:
				return nil, fmt.Errorf("%w: %s", ErrRefused, m.Data)
			case kindHead:
				var h head
				if err := json.Unmarshal(m.Data, &h); err != nil || h.Status < 100 || h.Status > 999 {
					return nil, fmt.Errorf("%w: bad head %q", ErrProtocol, m.Data)
				}
				return &h, nil
			default:
				return nil, fmt.Errorf("%w: %q frame before the head", ErrProtocol, frameKind(m))
			}
		case <-x.ctx.Done():
			return nil, context.Cause(x.ctx)
		case <-t.C:
			return nil, fmt.Errorf("%w: nothing for %s", gone, wait)
		}
	}
}

func (x *call) Read(p []byte) (int, error) { return x.body.Read(p) }

// Close ends the request; one not read to its end is cancelled at the
// collector.
func (x *call) Close() error {
	x.close()
	return nil
}

func (x *call) close() {
	x.once.Do(func() {
		if x.body == nil || !x.body.done {
			_ = x.c.nc.PublishMsg(frame(x.reqSubject(), kindCancel, -1, nil))
		}
		x.cancelCause(context.Canceled)
		x.cancelTimeout()
		x.wg.Wait()
		if x.sub != nil {
			_ = x.sub.Unsubscribe()
		}
		x.c.release(x.cluster)
	})
}
