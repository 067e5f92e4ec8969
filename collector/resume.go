package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// A watch resumes after a failed publish from the resourceVersion of its
// last event whose publishes were all acknowledged, in order (issue #48):
// the member replays every change since, so nothing is coalesced within
// the member's watch window; only a 410 for that resourceVersion relists.
// A relist instead would publish each object's state at the time of the
// list, and the history would lose every change between.

// maxTracked bounds the events one watch scope may have unacknowledged.
// Publishes are acknowledged or time out, so it is only reached if nats.go
// drops a publish without calling back (see awaitAcks); the scope then
// resumes from what was acknowledged, which republishes nothing twice
// (stream.MsgID) and keeps the queue bounded.
const maxTracked = 1 << 16

// settleWait bounds the wait, before a resume, for the scope's publishes
// still in flight: each has its own ack timeout, so this is reached only
// for one nats.go dropped; it stays unacknowledged and is replayed.
func settleWait(ackTimeout time.Duration) time.Duration { return 2*ackTimeout + 5*time.Second }

// pubRec is one object message a watch event published.
type pubRec struct{ uid, typ, rv string }

// ackEntry is one watch event of a scope: acknowledged once all its
// publishes are (a bookmark or an unchanged object publishes nothing).
type ackEntry struct {
	t     *ackTrack
	epoch uint64
	uid   string
	rv    string
	// open: the event is still being published; more may be added.
	open    bool
	pending int
	failed  bool
	pubs    []pubRec
}

// doubt is what a resumed watch must check before it publishes a replayed
// version of one object: the versions published after the acknowledged
// resourceVersion, whose fate is unknown (a timed-out publish may still
// have been stored from the reconnect buffer, a later one of the same
// object may have been stored after an earlier one was lost).
type doubt struct {
	recs []pubRec
	// looked: skip holds what the stream was found to hold already.
	looked bool
}

// ackTrack follows the publishes of one watch scope in event order.
// Callbacks from nats.go (resolve) take mu only, never call back into
// nats.go, so the order with nats.go's publisher lock is always that one
// first.
type ackTrack struct {
	mu    sync.Mutex
	acked string
	q     []*ackEntry
	epoch uint64
	// cancel ends the current watch with errResume (set per watch epoch).
	cancel context.CancelCauseFunc
	// resumedFrom is the resourceVersion the current epoch resumed from
	// after a failed publish ("" before the first).
	resumedFrom string
	// lastRead is the resourceVersion of the last event read (the failure
	// point, for the log).
	lastRead string

	// doubts is only read and written by the scope's watch goroutine.
	doubts map[string]*doubt
}

func newAckTrack(rv string) *ackTrack {
	return &ackTrack{acked: rv, doubts: map[string]*doubt{}}
}

func (t *ackTrack) setCancel(c context.CancelCauseFunc) {
	t.mu.Lock()
	t.cancel = c
	t.mu.Unlock()
}

// begin starts the entry of an event being published.
func (t *ackTrack) begin(uid, rv string) *ackEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &ackEntry{t: t, epoch: t.epoch, uid: uid, rv: rv, open: true}
	t.q = append(t.q, e)
	t.lastRead = rv
	if len(t.q) > maxTracked {
		t.failLocked()
	}
	return e
}

// add records a publish of e (before it is sent, so its callback finds it).
func (e *ackEntry) add(msg *nats.Msg) {
	ps, _ := stream.ParseSubject(msg.Subject)
	t := e.t
	t.mu.Lock()
	e.pending++
	e.pubs = append(e.pubs, pubRec{uid: ps.UID, typ: msg.Header.Get(stream.HdrType), rv: msg.Header.Get(stream.HdrRV)})
	t.mu.Unlock()
}

// resolve takes the outcome of one of e's publishes; a failure ends the
// scope's watch so it resumes.
func (e *ackEntry) resolve(ok bool) {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.epoch != t.epoch {
		return // a resume dropped it: it is replayed
	}
	e.pending--
	if !ok {
		e.failed = true
		t.failLocked()
	}
	t.advanceLocked()
}

// finish closes e: every publish of its event has been made.
func (e *ackEntry) finish() {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.epoch != t.epoch {
		return
	}
	e.open = false
	t.advanceLocked()
}

// fail ends the current watch so the scope resumes (the stream could not
// be asked what it holds of a replayed object).
func (t *ackTrack) fail() {
	t.mu.Lock()
	t.failLocked()
	t.mu.Unlock()
}

func (t *ackTrack) failLocked() {
	if t.cancel != nil {
		t.cancel(errResume)
	}
}

// advanceLocked moves the acknowledged resourceVersion over the settled
// head of the queue: a bookmark's counts only once all before it did.
func (t *ackTrack) advanceLocked() {
	n := 0
	for _, e := range t.q {
		if e.open || e.pending > 0 || e.failed {
			break
		}
		if e.rv != "" {
			t.acked = e.rv
		}
		n++
	}
	if n > 0 {
		clear(t.q[:n])
		t.q = t.q[n:]
	}
}

// ackedRV is the resourceVersion to resume from.
func (t *ackTrack) ackedRV() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked
}

// settled reports whether no publish of the scope is in flight.
func (t *ackTrack) settled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.q {
		if e.pending > 0 {
			return false
		}
	}
	return true
}

// rebase starts a new epoch from the acknowledged resourceVersion: every
// version published after it becomes a doubt the replay resolves against
// the stream. It returns that resourceVersion.
func (t *ackTrack) rebase() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epoch++
	for _, d := range t.doubts {
		if d.looked {
			// What was found stored and not replayed yet stays to skip;
			// the stream is asked again with the new versions added.
			d.looked = false
		}
	}
	for _, e := range t.q {
		for _, p := range e.pubs {
			d := t.doubts[p.uid]
			if d == nil {
				d = &doubt{}
				t.doubts[p.uid] = d
			}
			if !containsRec(d.recs, p) {
				d.recs = append(d.recs, p)
			}
		}
	}
	clear(t.q)
	t.q = t.q[:0]
	t.resumedFrom = t.acked
	return t.acked
}

func containsRec(recs []pubRec, p pubRec) bool {
	for _, r := range recs {
		if r.typ == p.typ && r.rv == p.rv {
			return true
		}
	}
	return false
}

// storedFunc returns the type and resourceVersion of the last message the
// stream holds for uid (found false: none).
type storedFunc func(ctx context.Context, uid string) (typ, rv string, found bool, err error)

// replayed reports whether the replayed version (typ, rv) of uid is
// already in the stream and must not be published again: published after
// a newer version of the object was stored, it would put the object back
// to an older state, and in the history after its newer revision. The
// stream is asked once per object in doubt; what it holds and every
// version published before it are skipped (a version lost while a later
// one was stored cannot be put back in its place: that change is lost).
func (t *ackTrack) replayed(ctx context.Context, uid, typ, rv string, stored storedFunc) (bool, error) {
	d := t.doubts[uid]
	if d == nil {
		return false, nil
	}
	if !d.looked {
		styp, srv, found, err := stored(ctx, uid)
		if err != nil {
			return false, err
		}
		k := -1
		if found {
			for i, r := range d.recs {
				if r.typ == styp && r.rv == srv {
					k = i
				}
			}
		}
		d.recs, d.looked = d.recs[:k+1], true
	}
	for i, r := range d.recs {
		if r.typ == typ && r.rv == rv {
			d.recs = append(d.recs[:i:i], d.recs[i+1:]...)
			if len(d.recs) == 0 {
				delete(t.doubts, uid)
			}
			return true, nil
		}
	}
	if len(d.recs) == 0 {
		delete(t.doubts, uid)
	}
	return false, nil
}

// ackEntryKey carries a watch event's ackEntry to Collector.publish.
type ackEntryKey struct{}

func withAckEntry(ctx context.Context, e *ackEntry) context.Context {
	return context.WithValue(ctx, ackEntryKey{}, e)
}

func ackEntryFrom(ctx context.Context) *ackEntry {
	e, _ := ctx.Value(ackEntryKey{}).(*ackEntry)
	return e
}

// lastStored is a storedFunc on the cluster's stream.
func (s *resourceSync) lastStored(ctx context.Context, uid string) (string, string, bool, error) {
	s.streamMu.Lock()
	st := s.stream
	s.streamMu.Unlock()
	if st == nil {
		var err error
		if st, err = s.js.Stream(ctx, stream.StreamName(s.cluster)); err != nil {
			return "", "", false, fmt.Errorf("resume %s: %w", s.w.gvr, err)
		}
		s.streamMu.Lock()
		s.stream = st
		s.streamMu.Unlock()
	}
	m, err := st.GetLastMsgForSubject(ctx, stream.ObjectSubject(s.cluster, s.w.gvr, uid))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("resume %s: last message of %s: %w", s.w.gvr, uid, err)
	}
	return m.Header.Get(stream.HdrType), m.Header.Get(stream.HdrRV), true, nil
}

// resume waits until NATS is reachable and the scope's publishes in
// flight are settled, then makes sure every publish sent before is in
// the stream (a SYNCED marker acknowledged after them: the stream stores a
// connection's messages in order, and the marker changes no object), and
// returns the resourceVersion to watch from.
func (s *resourceSync) resume(ctx context.Context, ns string, t *ackTrack) (string, error) {
	b := backoff{max: 10 * time.Second}
	for {
		if err := s.pub.awaitConnected(ctx); err != nil {
			return "", err
		}
		deadline := time.Now().Add(settleWait(s.pub.ackTimeout()))
		for !t.settled() && time.Now().Before(deadline) {
			tm := time.NewTimer(reconnectPoll)
			select {
			case <-ctx.Done():
				tm.Stop()
				return "", ctx.Err()
			case <-tm.C:
			}
		}
		err := s.publishControl(ctx, fleetviewv1.EventType_EVENT_TYPE_SYNCED)
		if err == nil {
			break
		}
		s.setErr(err)
		s.log.Warn("resume: the stream is not answering yet; retrying", "namespace", ns, "err", err)
		if !b.wait(ctx) {
			return "", ctx.Err()
		}
	}
	s.setErr(nil)
	rv := t.rebase()
	s.m.resumes.Add(1)
	return rv, nil
}
