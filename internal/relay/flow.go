package relay

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// credit follows the peer's acknowledgements of the chunks sent to it: a
// sender may have at most window chunks unacknowledged.
type credit struct {
	mu    sync.Mutex
	acked int
	wake  chan struct{}
}

func newCredit() *credit { return &credit{wake: make(chan struct{})} }

func (c *credit) ack(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.acked {
		c.acked = n
		close(c.wake)
		c.wake = make(chan struct{})
	}
}

// wait returns when chunk seq may be sent, or with the context's error, or
// with gone when no acknowledgement came for idle.
func (c *credit) wait(ctx context.Context, seq, window int, idle time.Duration, gone error) error {
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		c.mu.Lock()
		ok, w := seq <= c.acked+window, c.wake
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-w:
			if !t.Stop() {
				<-t.C
			}
			t.Reset(idle)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return fmt.Errorf("%w: no acknowledgement for %s", gone, idle)
		}
	}
}

// sender publishes one body as numbered chunks under flow control.
type sender struct {
	nc      *nats.Conn
	subject string
	chunk   int
	window  int
	max     int64
	idle    time.Duration
	gone    error
	credit  *credit
	seq     int
	sent    int64
}

// write sends p in chunks, waiting for credit.
func (s *sender) write(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), s.chunk)
		if s.max > 0 && s.sent+int64(n) > s.max {
			return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, s.max)
		}
		if err := s.credit.wait(ctx, s.seq+1, s.window, s.idle, s.gone); err != nil {
			return err
		}
		s.seq++
		if err := s.nc.PublishMsg(frame(s.subject, kindData, s.seq, p[:n])); err != nil {
			return err
		}
		s.sent += int64(n)
		p = p[n:]
	}
	return nil
}

// end marks the body complete.
func (s *sender) end() error { return s.nc.PublishMsg(frame(s.subject, kindEnd, s.seq, nil)) }

// copyFrom sends everything r gives, then the end.
func (s *sender) copyFrom(ctx context.Context, r io.Reader) error {
	buf := make([]byte, s.chunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := s.write(ctx, buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return s.end()
		}
		if err != nil {
			return err
		}
	}
}

// queue takes a request's frames from the subscription's callback without
// ever blocking it: flow control keeps a peer that follows the protocol
// within its capacity, so a full queue is the peer's fault and fails the
// request.
type queue struct {
	ch       chan *nats.Msg
	mu       sync.Mutex
	overflow bool
}

func newQueue(window int) *queue { return &queue{ch: make(chan *nats.Msg, window+16)} }

func (q *queue) put(m *nats.Msg) {
	select {
	case q.ch <- m:
	default:
		q.mu.Lock()
		q.overflow = true
		q.mu.Unlock()
	}
}

func (q *queue) overflowed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.overflow
}

// receiver reads a body's chunks from a queue in order, acknowledging each
// as it is taken, and fails on a gap, an overflow, a peer's error or
// silence longer than idle.
type receiver struct {
	ctx  context.Context
	q    *queue
	ack  func(seq int)
	idle time.Duration
	gone error
	max  int64
	// keep is told of keep-alives (the hub's side resets its idle timer).
	seq  int
	n    int64
	buf  []byte
	err  error
	done bool
}

func (r *receiver) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.next()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// next takes the next frame; nil when it was a chunk (in r.buf) or a
// keep-alive.
func (r *receiver) next() error {
	t := time.NewTimer(r.idle)
	defer t.Stop()
	var m *nats.Msg
	select {
	case m = <-r.q.ch:
	case <-r.ctx.Done():
		return context.Cause(r.ctx)
	case <-t.C:
		return fmt.Errorf("%w: nothing for %s", r.gone, r.idle)
	}
	if r.q.overflowed() {
		return fmt.Errorf("%w: the peer sent more chunks than acknowledged", ErrProtocol)
	}
	switch frameKind(m) {
	case kindKeep:
		return nil
	case kindError:
		return fmt.Errorf("%w: %s", ErrRefused, m.Data)
	case kindData, kindEnd:
	default:
		return fmt.Errorf("%w: unexpected %q frame in a body", ErrProtocol, frameKind(m))
	}
	seq, err := frameSeq(m)
	if err != nil {
		return err
	}
	if frameKind(m) == kindEnd {
		if seq != r.seq {
			return fmt.Errorf("%w: the body ended at chunk %d, %d received", ErrProtocol, seq, r.seq)
		}
		r.done = true
		return io.EOF
	}
	if seq != r.seq+1 {
		return fmt.Errorf("%w: chunk %d after %d (a frame was lost)", ErrProtocol, seq, r.seq)
	}
	r.seq = seq
	r.n += int64(len(m.Data))
	if r.max > 0 && r.n > r.max {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, r.max)
	}
	r.ack(seq)
	r.buf = m.Data
	return nil
}
