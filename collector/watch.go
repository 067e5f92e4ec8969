package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// watchScope watches one scope from rv (the list's), resuming after a
// closed watch and retrying while the apiserver is unreachable. After a
// failed publish it resumes from the resourceVersion of the last event
// whose publishes were all acknowledged, once NATS is reachable (resume.go).
// It returns errRelist when the watch cannot resume (410 Gone) and an
// error when the resource must be listed again for another reason.
func (s *resourceSync) watchScope(ctx context.Context, ns, rv string) error {
	t := newAckTrack(rv)
	// b spaces resumes that acknowledged nothing: NATS reachable but
	// refusing the replay would otherwise be asked again at once.
	b := backoff{max: 10 * time.Second}
	for {
		wctx, cancel := context.WithCancelCause(ctx)
		t.setCancel(cancel)
		err := s.watchFrom(wctx, ns, rv, t)
		failed := errors.Is(context.Cause(wctx), errResume)
		cancel(nil)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !failed {
			return err
		}
		acked := t.ackedRV()
		s.log.Warn("a publish of the watch failed; resuming from the last acknowledged resourceVersion once NATS is reachable",
			"namespace", ns, "acked", acked, "read", t.lastRead, "err", err)
		if acked != rv {
			b.reset()
		} else if !b.wait(ctx) {
			return ctx.Err()
		}
		if rv, err = s.resume(ctx, ns, t); err != nil {
			return err
		}
	}
}

// watchFrom is one epoch of watchScope: it watches from rv until the watch
// cannot resume by itself, or t's cancel ends ctx.
func (s *resourceSync) watchFrom(ctx context.Context, ns, rv string, t *ackTrack) error {
	b := backoff{max: 10 * time.Second}
	for {
		body, err := s.raw.Get().AbsPath(s.path(ns)...).SetHeader("Accept", tableAccept).
			Param("watch", "true").Param("resourceVersion", rv).Param("allowWatchBookmarks", "true").
			Param("includeObject", includeObject).Param("timeoutSeconds", strconv.Itoa(int(watchTimeout/time.Second))).
			Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return s.expired(ns, rv, t)
			}
			s.log.Warn("watch failed; retrying", "namespace", ns, "err", err)
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		var got bool
		from := rv
		rv, got, err = s.consume(ctx, body, rv, t)
		body.Close()
		if errors.Is(err, errRelist) && rv == from {
			return s.expired(ns, rv, t)
		}
		if err != nil {
			return err
		}
		if got {
			b.reset()
		}
	}
}

// expired is the member's 410 for rv: the resource relists. When rv is the
// one a resume after a failed publish started from, the changes since it
// are coalesced by that relist, so it is logged and counted.
func (s *resourceSync) expired(ns, rv string, t *ackTrack) error {
	t.mu.Lock()
	from, read := t.resumedFrom, t.lastRead
	t.mu.Unlock()
	if from != "" && rv == from {
		s.m.resumeExpired.Add(1)
		s.log.Warn("the last acknowledged resourceVersion left the member's watch window (410 Gone); relisting: the changes since reach the stream as one state per object",
			"namespace", ns, "resumeFrom", rv, "lastRead", read)
	}
	return errRelist
}

// watchEvent is one line of a watch response: the object is the resource's
// own JSON, or a Table of one row when the member printed it.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// consume publishes the events of one watch response until it ends. The
// body is closed by the caller; a cancelled ctx makes the transport end
// the read.
func (s *resourceSync) consume(ctx context.Context, body io.Reader, rv string, t *ackTrack) (string, bool, error) {
	got := false
	dec := json.NewDecoder(body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return rv, got, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return rv, got, nil
			}
			// A broken connection ends the watch like a timeout does: it
			// resumes from the last version read.
			s.log.Warn("watch ended", "err", err)
			return rv, got, nil
		}
		got = true
		if ev.Type == "ERROR" {
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return rv, got, fmt.Errorf("watch %s: %w: error event: %w", s.w.gvr, ErrBadJSON, err)
			}
			err := &apierrors.StatusError{ErrStatus: st}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, got, errRelist
			}
			return rv, got, fmt.Errorf("watch %s: %w", s.w.gvr, err)
		}
		obj, cells, err := s.watchObject(ev.Object)
		if err != nil {
			return rv, got, fmt.Errorf("watch %s: %s event: %w", s.w.gvr, ev.Type, err)
		}
		read := readMeta
		if ev.Type == "BOOKMARK" {
			read = readObjMeta // a bookmark's object carries only its resourceVersion
		}
		m, err := read(obj)
		if err != nil {
			return rv, got, fmt.Errorf("watch %s: %s event: %w", s.w.gvr, ev.Type, err)
		}
		if err := s.apply(ctx, ev.Type, m, obj, cells, t); err != nil {
			return rv, got, err
		}
		if m.rv != "" {
			rv = m.rv
		}
	}
}

// apply publishes one watch event as an entry of t, so its
// acknowledgement moves the scope's resume point; a replayed version the
// stream already holds is only recorded (ackTrack.replayed).
func (s *resourceSync) apply(ctx context.Context, typ string, m objMeta, obj, cells []byte, t *ackTrack) error {
	e := t.begin(m.uid, m.rv)
	defer e.finish()
	ectx := withAckEntry(ctx, e)
	switch typ {
	case "ADDED", "MODIFIED":
		skip, err := t.replayed(ctx, m.uid, upsertType, m.rv, s.lastStored)
		if err != nil {
			t.fail()
			return err
		}
		if skip {
			s.ledger.put(m, 0)
			return nil
		}
		return s.upsert(ectx, m, obj, cells, 0)
	case "DELETED":
		ref := objRef{rv: m.rv, ns: m.namespace, name: m.name}
		skip, err := t.replayed(ctx, m.uid, deleteType, m.rv, s.lastStored)
		if err != nil {
			t.fail()
			return err
		}
		if skip {
			s.ledger.remove(m.uid, ref)
			return nil
		}
		return s.removeRef(ectx, m.uid, m.rv, ref)
	case "BOOKMARK":
		return nil
	}
	return fmt.Errorf("watch %s: unknown event type %q", s.w.gvr, typ)
}

// The header types of object messages (stream.HdrType).
var (
	upsertType = fleetviewv1.EventType_EVENT_TYPE_UPSERT.String()
	deleteType = fleetviewv1.EventType_EVENT_TYPE_DELETE.String()
)

// watchObject returns the object of a watch event and its cells: the
// object itself, or the one row of a Table (whose first event also
// carries the column definitions).
func (s *resourceSync) watchObject(raw []byte) (obj, cells []byte, err error) {
	var buf [8]rawjson.Member
	ms, err := rawjson.ObjectMembers(raw, buf[:0])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadJSON, err)
	}
	var kind, rows, cols []byte
	for _, m := range ms {
		switch string(m.Key) {
		case "kind":
			kind = raw[m.ValueStart:m.ValueEnd]
		case "rows":
			rows = raw[m.ValueStart:m.ValueEnd]
		case "columnDefinitions":
			cols = raw[m.ValueStart:m.ValueEnd]
		}
	}
	if !bytes.Equal(kind, []byte(`"Table"`)) {
		return raw, nil, nil
	}
	if err := s.setColumns(cols); err != nil {
		return nil, nil, err
	}
	var arr [2]rawjson.Span
	spans, err := rawjson.Elements(rows, arr[:0])
	if err != nil || len(spans) != 1 {
		return nil, nil, fmt.Errorf("%w: a watch event's Table has %d rows, want 1 (%v)", ErrBadJSON, len(spans), err)
	}
	return s.tableRow(rows[spans[0].Start:spans[0].End])
}
