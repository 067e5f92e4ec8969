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
)

// watchScope watches one scope from rv, resuming after a closed watch and
// retrying while the apiserver is unreachable. It returns errRelist when the
// watch cannot resume (410 Gone) and an error when a publish failed.
func (s *resourceSync) watchScope(ctx context.Context, ns, rv string) error {
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
				return errRelist
			}
			s.log.Warn("watch failed; retrying", "namespace", ns, "err", err)
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		var got bool
		rv, got, err = s.consume(ctx, body, rv)
		body.Close()
		if err != nil {
			return err
		}
		if got {
			b.reset()
		}
	}
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
func (s *resourceSync) consume(ctx context.Context, body io.Reader, rv string) (string, bool, error) {
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
		switch ev.Type {
		case "ADDED", "MODIFIED":
			if err := s.upsert(ctx, m, obj, cells, 0); err != nil {
				return rv, got, err
			}
		case "DELETED":
			if err := s.removeRef(ctx, m.uid, m.rv, objRef{rv: m.rv, ns: m.namespace, name: m.name}); err != nil {
				return rv, got, err
			}
		case "BOOKMARK":
		default:
			return rv, got, fmt.Errorf("watch %s: unknown event type %q", s.w.gvr, ev.Type)
		}
		if m.rv != "" {
			rv = m.rv
		}
	}
}

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
