package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// initialEventsEnd is the annotation on the BOOKMARK that ends a streaming
// list's initial events (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = "k8s.io/initial-events-end"

// params are the query parameters of a list, get or watch.
type params struct {
	labelSelector, fieldSelector string
	limit                        int64
	cont                         string
	resourceVersion              string
	resourceVersionMatch         metav1.ResourceVersionMatch
	watch, bookmarks, initial    bool
	timeout                      time.Duration
	table                        bool
	includeObject                metav1.IncludeObjectPolicy
}

func badParam(name, value, why string) error {
	return fmt.Errorf("%w: invalid %s %q: %s", ErrBadRequest, name, value, why)
}

func parseBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badParam(name, v, "not a boolean")
	}
	return b, nil
}

func parseParams(r *http.Request) (*params, error) {
	q := r.URL.Query()
	p := &params{labelSelector: q.Get("labelSelector"), fieldSelector: q.Get("fieldSelector"), cont: q.Get("continue"),
		resourceVersion: q.Get("resourceVersion"), includeObject: metav1.IncludeMetadata}
	var err error
	if v := q.Get("limit"); v != "" {
		if p.limit, err = strconv.ParseInt(v, 10, 64); err != nil || p.limit < 0 {
			return nil, badParam("limit", v, "not a non-negative integer")
		}
	}
	if p.watch, err = parseBool("watch", q.Get("watch")); err != nil {
		return nil, err
	}
	if p.bookmarks, err = parseBool("allowWatchBookmarks", q.Get("allowWatchBookmarks")); err != nil {
		return nil, err
	}
	if p.initial, err = parseBool("sendInitialEvents", q.Get("sendInitialEvents")); err != nil {
		return nil, err
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badParam("timeoutSeconds", v, "not a non-negative integer")
		}
		// Capped at the longest Duration: n seconds in nanoseconds
		// overflows past it, wrapping to a negative timeout (none) or to
		// a short one that ends the watch at once.
		p.timeout = time.Duration(min(n, int64(math.MaxInt64/time.Second))) * time.Second
	}
	switch m := q.Get("resourceVersionMatch"); m {
	case "", string(metav1.ResourceVersionMatchNotOlderThan):
	case string(metav1.ResourceVersionMatchExact):
		if err := exactParams(p); err != nil {
			return nil, err
		}
	default:
		return nil, badParam("resourceVersionMatch", m, "must be Exact or NotOlderThan")
	}
	p.resourceVersionMatch = metav1.ResourceVersionMatch(q.Get("resourceVersionMatch"))
	if p.initial {
		if !p.watch {
			return nil, badParam("sendInitialEvents", "true", "only with watch=true")
		}
		if q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) {
			return nil, badParam("resourceVersionMatch", q.Get("resourceVersionMatch"), "sendInitialEvents=true requires NotOlderThan")
		}
	}
	switch v := q.Get("includeObject"); v {
	case "":
	case string(metav1.IncludeNone), string(metav1.IncludeMetadata), string(metav1.IncludeObject):
		p.includeObject = metav1.IncludeObjectPolicy(v)
	default:
		return nil, badParam("includeObject", v, "must be None, Metadata or Object")
	}
	p.table = wantsTable(r)
	return p, nil
}

// exactParams checks resourceVersionMatch=Exact with the rules (and the
// messages) of Kubernetes' list options validation. Kubernetes answers them
// 422 Invalid; here, like every parameter error, they are 400 BadRequest.
func exactParams(p *params) error {
	if p.watch {
		return badParam("resourceVersionMatch", string(metav1.ResourceVersionMatchExact), "a watch supports only NotOlderThan")
	}
	if why := query.ExactForbidden(p.resourceVersion, p.cont); why != "" {
		return fmt.Errorf("%w: resourceVersionMatch: Forbidden: %s", ErrBadRequest, why)
	}
	return nil
}

// wantsTable reports whether Accept asks for a meta.k8s.io/v1 Table.
func wantsTable(r *http.Request) bool {
	for _, a := range bytes.Split([]byte(r.Header.Get("Accept")), []byte(",")) {
		p := mediaParams(string(a))
		if p["as"] == "Table" && p["g"] == "meta.k8s.io" && p["v"] == "v1" {
			return true
		}
	}
	return false
}

func (h *Handler) serveResource(ctx context.Context, w http.ResponseWriter, req *request) {
	gr := schema.GroupResource{Group: req.gv.Group, Resource: req.resource}
	fail := func(err error) { writeStatus(w, toKubeStatus(err, gr, req.name)) }
	c, err := h.lookup(req)
	if err != nil {
		fail(err)
		return
	}
	if !c.namespaced && req.namespace != "" {
		fail(fmt.Errorf("%w: %s is cluster-scoped", ErrUnknownResource, gr))
		return
	}
	p, err := parseParams(req.r)
	if err != nil {
		fail(err)
		return
	}
	switch {
	case p.watch:
		h.serveWatch(ctx, w, req, c, p)
	case req.name != "":
		h.serveGet(ctx, w, req, c, p)
	default:
		h.serveList(ctx, w, req, c, p)
	}
}

func grpcGroup(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

func clustersOf(req *request) []string {
	if req.cluster == "" {
		return nil
	}
	return []string{req.cluster}
}

func (h *Handler) serveList(ctx context.Context, w http.ResponseWriter, req *request, c cached, p *params) {
	rv := p.resourceVersion
	lr := &fleetviewv1.ListRequest{Group: grpcGroup(c.gvr.Group), Version: c.gvr.Version, Resource: c.gvr.Resource,
		Namespace: req.namespace, LabelSelector: p.labelSelector, FieldSelector: p.fieldSelector,
		Clusters: clustersOf(req), Limit: p.limit, Continue: p.cont, ResourceVersion: rv}
	lr.ResourceVersionMatch = string(p.resourceVersionMatch)
	if p.cont != "" {
		// A continue token pins its snapshot; clients may repeat the
		// list's resourceVersion beside it.
		lr.ResourceVersion = ""
	}
	resp, err := h.query.List(ctx, lr, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		writeStatus(w, toKubeStatus(err, c.gvr.GroupResource(), ""))
		return
	}
	lm := metav1.ListMeta{ResourceVersion: resp.GetResourceVersion(), Continue: resp.GetContinue()}
	if resp.RemainingItemCount != nil {
		n := resp.GetRemainingItemCount()
		lm.RemainingItemCount = &n
	}
	if p.table {
		t, err := newTable(c, lm)
		if err == nil {
			for _, it := range resp.GetRawItems() {
				if rerr := t.addRow(it, p.includeObject); rerr != nil {
					h.skip(it, "a Table", rerr)
				}
			}
		}
		if err != nil {
			writeStatus(w, toKubeStatus(err, c.gvr.GroupResource(), ""))
			return
		}
		writeJSON(w, http.StatusOK, "application/json", t.Table)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = writeList(w, c, lm, resp.GetRawItems())
}

// listChunk is how much of a list is written at a time: the answer is
// streamed from one reused buffer instead of being copied whole into a
// new one (22 MB for 15k Pods) first.
const listChunk = 256 << 10

// writeList writes a <Kind>List around the stored item bytes.
func writeList(w io.Writer, c cached, lm metav1.ListMeta, items [][]byte) error {
	b := make([]byte, 0, listChunk+64<<10)
	b = appendListHead(b, c, lm)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, c, it)
		if len(b) >= listChunk {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(append(b, "]}\n"...))
	return err
}

// appendListHead writes a <Kind>List up to its first item.
func appendListHead(b []byte, c cached, lm metav1.ListMeta) []byte {
	b = append(b, `{"kind":`...)
	b = strconv.AppendQuote(b, c.kind+"List")
	b = append(b, `,"apiVersion":`...)
	b = strconv.AppendQuote(b, c.gvr.GroupVersion().String())
	b = append(b, `,"metadata":{"resourceVersion":`...)
	b = strconv.AppendQuote(b, lm.ResourceVersion)
	if lm.Continue != "" {
		b = append(b, `,"continue":`...)
		b = strconv.AppendQuote(b, lm.Continue)
	}
	if lm.RemainingItemCount != nil {
		b = append(b, `,"remainingItemCount":`...)
		b = strconv.AppendInt(b, *lm.RemainingItemCount, 10)
	}
	return append(b, `},"items":[`...)
}

// appendItem writes a stored object, inserting apiVersion and kind when it
// lacks them: objects listed from a member cluster carry none, objects
// from its watch do, and encoders write them first.
func appendItem(b []byte, c cached, it []byte) []byte {
	t := bytes.TrimLeft(it, " \t\r\n")
	if bytes.HasPrefix(t, []byte(`{"kind":`)) || bytes.HasPrefix(t, []byte(`{"apiVersion":`)) || len(t) < 2 || t[0] != '{' {
		return append(b, it...)
	}
	b = appendTypeMeta(append(b, '{'), c, false, false)
	if rest := bytes.TrimLeft(t[1:], " \t\r\n"); len(rest) == 0 || rest[0] == '}' {
		b = b[:len(b)-1] // an empty object: no member follows
	}
	return append(b, t[1:]...)
}

// appendTypeMeta writes the kind and apiVersion members an object lacks
// (hasKind, hasAPIVersion false), each followed by a comma.
func appendTypeMeta(b []byte, c cached, hasKind, hasAPIVersion bool) []byte {
	if !hasKind {
		b = append(b, `"kind":`...)
		b = strconv.AppendQuote(b, c.kind)
		b = append(b, ',')
	}
	if !hasAPIVersion {
		b = append(b, `"apiVersion":`...)
		b = strconv.AppendQuote(b, c.gvr.GroupVersion().String())
		b = append(b, ',')
	}
	return b
}

func (h *Handler) serveGet(ctx context.Context, w http.ResponseWriter, req *request, c cached, p *params) {
	resp, err := h.query.Get(ctx, &fleetviewv1.GetRequest{Group: grpcGroup(c.gvr.Group), Version: c.gvr.Version, Resource: c.gvr.Resource,
		Namespace: req.namespace, Name: req.name, Cluster: req.cluster})
	if err != nil {
		writeStatus(w, toKubeStatus(err, c.gvr.GroupResource(), req.name))
		return
	}
	// The stored bytes, as in lists: no JSON -> Struct -> JSON.
	b := appendItem(nil, c, resp.GetRawObject())
	if p.table {
		t, err := newTable(c, metav1.ListMeta{})
		if err == nil {
			err = t.addRow(b, p.includeObject)
		}
		if err != nil {
			writeStatus(w, toKubeStatus(err, c.gvr.GroupResource(), req.name))
			return
		}
		writeJSON(w, http.StatusOK, "application/json", t.Table)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (h *Handler) serveWatch(ctx context.Context, w http.ResponseWriter, req *request, c cached, p *params) {
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	stream, err := h.query.Watch(ctx, watchRequest(req, c, p))
	if err != nil {
		writeStatus(w, toKubeStatus(err, c.gvr.GroupResource(), ""))
		return
	}
	events := receive(ctx, stream)
	// One line buffer per watch: a thousand watchers writing a fresh line
	// per delivery were most of the watch path's garbage.
	var buf []byte
	ww := &watchWriter{w: w, rc: http.NewResponseController(w), gr: c.gvr.GroupResource()}
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
		line, err := watchLine(buf[:0], r.ev, c, p)
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
		if cap(line) <= maxReusedLine {
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
	w       http.ResponseWriter
	rc      *http.ResponseController
	gr      schema.GroupResource
	started bool
}

// start answers 200 and the headers, once.
func (ww *watchWriter) start() {
	if !ww.started {
		ww.started = true
		ww.w.Header().Set("Content-Type", "application/json")
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
		writeStatus(ww.w, toKubeStatus(err, ww.gr, ""))
	default:
		b, _ := jsonLine(metav1.WatchEvent{Type: "ERROR"}, toKubeStatus(err, ww.gr, ""))
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
		t, err := newTable(c, metav1.ListMeta{ResourceVersion: rv})
		if err != nil {
			return nil, err
		}
		if err := t.addRow(b, p.includeObject); err != nil {
			return nil, err
		}
		return jsonLine(metav1.WatchEvent{Type: ev.GetType()}, t.Table)
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

// objectCluster reads the cluster annotation of stored JSON, "" when it
// cannot.
func objectCluster(b []byte) string {
	var cluster string
	_, _ = rawjson.EachMember(b, 0, func(m rawjson.Member) (int, error) {
		if string(m.Key) != "metadata" {
			return rawjson.SkipValue(b, m.ValueStart)
		}
		return rawjson.EachMember(b, m.ValueStart, func(m rawjson.Member) (int, error) {
			if string(m.Key) != "annotations" {
				return rawjson.SkipValue(b, m.ValueStart)
			}
			return rawjson.EachMember(b, m.ValueStart, func(m rawjson.Member) (int, error) {
				end, err := rawjson.SkipValue(b, m.ValueStart)
				if err == nil && string(m.Key) == clusterAnnotation {
					cluster, _ = rawjson.String(b[m.ValueStart:end])
				}
				return end, err
			})
		})
	})
	return cluster
}
