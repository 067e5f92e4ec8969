package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// initialEventsEnd is the annotation on the BOOKMARK that ends a streaming
// list's initial events (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = "k8s.io/initial-events-end"

func (h *Handler) serveWatch(ctx context.Context, w http.ResponseWriter, req *request, c cached, p *params) {
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	stream, err := h.query.Watch(ctx, watchRequest(req, c, p))
	if err != nil {
		h.writeStatus(w, req.r, toKubeStatus(err, c.gvr.GroupResource(), ""))
		return
	}
	events := receive(ctx, stream)
	// One line buffer per watch: a thousand watchers writing a fresh line
	// per delivery were most of the watch path's garbage.
	var buf []byte
	ww := &watchWriter{h: h, r: req.r, w: w, rc: http.NewResponseController(w), gr: c.gvr.GroupResource()}
	if p.proto {
		ww.proto = h.proto.newWatch()
	}
	idle := time.NewTimer(firstEventWait)
	defer idle.Stop()
	for {
		var r recv
		select {
		case r = <-events:
		case <-idle.C:
			ww.start()
			continue
		case <-ctx.Done():
			ww.start()
			return
		}
		if r.err != nil {
			ww.fail(ctx, r.err)
			return
		}
		var line []byte
		if ww.proto != nil {
			line, err = ww.proto.storedEvent(c, r.ev.GetType(), r.ev.GetRawObject(), r.ev.GetResourceVersion())
		} else {
			line, err = watchLine(buf[:0], r.ev, c, p)
		}
		if err != nil {
			// One event the watch cannot encode is left out; the watch,
			// which may span every cluster, goes on.
			h.skip(r.ev.GetRawObject(), "a watch", err)
			line = buf[:0]
		}
		if len(line) > 0 && !ww.write(line) {
			return
		}
		if len(events) == 0 {
			// Flushed when nothing else is waiting: under load several
			// events go out in one write instead of one write each.
			ww.flush()
		}
		if ww.proto == nil && cap(line) <= maxReusedLine {
			buf = line // written: the next line reuses it
		}
	}
}

// maxReusedLine bounds the line buffer a watch keeps between events, so a
// rare huge object does not stay allocated for the watch's lifetime.
const maxReusedLine = 64 << 10

// watchRequest is the gRPC watch a Kubernetes watch request asks for.
func watchRequest(req *request, c cached, p *params) *fleetviewv1.WatchRequest {
	wr := &fleetviewv1.WatchRequest{Group: grpcGroup(c.gvr.Group), Version: c.gvr.Version, Resource: c.gvr.Resource,
		Namespace: req.namespace, LabelSelector: p.labelSelector, FieldSelector: p.fieldSelector, Clusters: clustersOf(req),
		ResourceVersion: p.resourceVersion, SendInitialEvents: p.initial, AllowBookmarks: p.bookmarks}
	if req.name != "" {
		// A watch on one object (kubectl get NAME --watch) is a watch
		// with a metadata.name field selector, as in Kubernetes.
		sel := "metadata.name=" + req.name
		if wr.FieldSelector != "" {
			sel += "," + wr.FieldSelector
		}
		wr.FieldSelector = sel
	}
	return wr
}

// recv is one receive from a gRPC watch stream.
type recv struct {
	ev  *fleetviewv1.WatchEvent
	err error
}

// receive reads the stream in its own goroutine so the handler can answer
// the headers without waiting for a first event: an idle resumed watch
// would otherwise leave the client without a response. It ends with ctx,
// which ends when the handler returns.
func receive(ctx context.Context, stream grpc.ServerStreamingClient[fleetviewv1.WatchEvent]) <-chan recv {
	// Buffered so that the writer sees whether more events are waiting.
	events := make(chan recv, 16)
	go func() {
		for {
			ev, err := stream.Recv()
			select {
			case events <- recv{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return events
}

// watchWriter writes a watch's answer. An error arriving before anything
// was written (an expired or malformed version) is a real HTTP status with
// a Status body; later errors are ERROR events, which reflectors handle the
// same way.
type watchWriter struct {
	h *Handler
	r *http.Request
	// proto encodes the events in protobuf frames; nil: JSON lines.
	proto   *protoWatch
	w       http.ResponseWriter
	rc      *http.ResponseController
	gr      schema.GroupResource
	started bool
}

// start answers 200 and the headers, once.
func (ww *watchWriter) start() {
	if !ww.started {
		ww.started = true
		ct := "application/json"
		if ww.proto != nil {
			// As kube-apiserver labels a protobuf watch.
			ct = runtime.ContentTypeProtobuf + ";stream=watch"
		}
		ww.w.Header().Set("Content-Type", ct)
		ww.w.WriteHeader(http.StatusOK)
		_ = ww.rc.Flush()
	}
}

// flush sends what was written to the client.
func (ww *watchWriter) flush() {
	if ww.started {
		_ = ww.rc.Flush()
	}
}

// write adds one event line (flush sends it); false when the client is
// gone.
func (ww *watchWriter) write(line []byte) bool {
	ww.start()
	if _, err := ww.w.Write(line); err != nil {
		return false
	}
	return true
}

// fail ends the watch on a stream error: a clean end, a Status before
// anything was written, or an ERROR event after.
func (ww *watchWriter) fail(ctx context.Context, err error) {
	switch {
	case errors.Is(err, io.EOF) || ctx.Err() != nil:
		ww.start()
	case ww.started && status.Code(err) == codes.Unavailable:
		// The server is shutting down: end the stream as kube-apiserver
		// does, so reflectors watch again from their last resourceVersion
		// (on another replica, or this one restarted). An ERROR event
		// would make them list everything again.
	case !ww.started:
		ww.h.writeStatus(ww.w, ww.r, toKubeStatus(err, ww.gr, ""))
	default:
		var b []byte
		if ww.proto != nil {
			b, _ = ww.proto.event("ERROR", toKubeStatus(err, ww.gr, ""))
		} else {
			b, _ = jsonLine(metav1.WatchEvent{Type: "ERROR"}, toKubeStatus(err, ww.gr, ""))
		}
		_, _ = ww.w.Write(b)
		_ = ww.rc.Flush()
	}
}

// firstEventWait is how long a watch waits for its first event (or error)
// before answering 200: an error within it is a real HTTP status.
const firstEventWait = 500 * time.Millisecond

// jsonLine encodes {"type":...,"object":obj} as one line.
func jsonLine(ev metav1.WatchEvent, obj any) ([]byte, error) {
	b, err := jsonMarshal(obj)
	if err != nil {
		return nil, err
	}
	ev.Object.Raw = b
	out, err := jsonMarshal(ev)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// watchLine appends the Kubernetes watch event of ev to out; nil skips it.
func watchLine(out []byte, ev *fleetviewv1.WatchEvent, c cached, p *params) ([]byte, error) {
	if ev.GetType() == "BOOKMARK" && p.table {
		return nil, nil
	}
	// Reflectors resume from the last event's object resourceVersion.
	obj, rv := ev.GetRawObject(), ev.GetResourceVersion()
	if p.table {
		b, err := appendWatchObject(nil, c, obj, rv)
		if err != nil {
			return nil, err
		}
		t := newTableWriter(c, p.includeObject)
		out = append(out, `{"type":`...)
		out = strconv.AppendQuote(out, ev.GetType())
		out = append(out, `,"object":`...)
		out = t.appendHead(out, &metav1.ListMeta{ResourceVersion: rv})
		if out, err = t.appendRow(out, b, ev.GetRawCells(), nil); err != nil {
			return nil, err
		}
		return append(out, "]}}\n"...), nil
	}
	// Sized once for the object, the version and the type meta.
	out = slices.Grow(out, len(obj)+len(rv)+len(c.kind)+len(c.gvr.Group)+len(c.gvr.Version)+96)
	out = append(out, `{"type":`...)
	out = strconv.AppendQuote(out, ev.GetType())
	out = append(out, `,"object":`...)
	out, err := appendWatchObject(out, c, obj, rv)
	if err != nil {
		return nil, err
	}
	return append(out, "}\n"...), nil
}

// appendWatchObject writes the stored object with kind and apiVersion
// (when it lacks them) and metadata.resourceVersion set to rv, splicing
// the bytes rather than decoding and encoding the object.
func appendWatchObject(b []byte, c cached, obj []byte, rv string) ([]byte, error) {
	var kind, apiVersion bool
	md := rawjson.Member{ValueStart: -1}
	rvm := rawjson.Member{ValueStart: -1}
	end, err := rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		switch string(m.Key) {
		case "kind":
			kind = true
		case "apiVersion":
			apiVersion = true
		case "metadata":
			md = m
			return rawjson.EachMember(obj, m.ValueStart, func(m rawjson.Member) (int, error) {
				e, err := rawjson.SkipValue(obj, m.ValueStart)
				if string(m.Key) == "resourceVersion" {
					rvm = m
					rvm.ValueEnd = e
				}
				return e, err
			})
		}
		return rawjson.SkipValue(obj, m.ValueStart)
	})
	if err == nil && rawjson.SkipSpace(obj, end) != len(obj) {
		err = fmt.Errorf("trailing data after the object")
	}
	if err != nil {
		return nil, fmt.Errorf("stored object: %w", err)
	}
	open := rawjson.SkipSpace(obj, 0) + 1
	empty := rawjson.SkipSpace(obj, open) == end-1 // "{}"
	b = appendTypeMeta(append(b, '{'), c, kind, apiVersion)
	switch {
	case rvm.ValueStart >= 0:
		b = append(b, obj[open:rvm.ValueStart]...)
		b = strconv.AppendQuote(b, rv)
		b = append(b, obj[rvm.ValueEnd:]...)
	case md.ValueStart >= 0:
		mdOpen := md.ValueStart + 1
		b = append(b, obj[open:mdOpen]...)
		b = append(b, `"resourceVersion":`...)
		b = strconv.AppendQuote(b, rv)
		if rawjson.SkipSpace(obj, mdOpen) < len(obj) && obj[rawjson.SkipSpace(obj, mdOpen)] != '}' {
			b = append(b, ',')
		}
		b = append(b, obj[mdOpen:]...)
	default:
		b = append(b, `"metadata":{"resourceVersion":`...)
		b = strconv.AppendQuote(b, rv)
		b = append(b, '}')
		if !empty {
			b = append(b, ',')
		}
		b = append(b, obj[open:]...)
	}
	return b, nil
}
