package rest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// watchHandler serves GET /v1/watch/{group}/{version}/{resource} as a
// Kubernetes-style watch: one JSON event per line
// ({"type":"ADDED","object":{...},"cluster":...,"resourceVersion":...}).
// It calls Watch through gRPC (so interceptors apply) rather than using
// grpc-gateway's stream forwarding, because an error before the first
// event must be a real HTTP status (410 Expired, 400) with a Status body,
// and a later one an {"type":"ERROR","object":Status} line, as Kubernetes
// clients expect.
type watchHandler struct {
	client fleetviewv1.QueryServiceClient
}

// NewWatch serves /v1/watch/{group}/{version}/{resource} through client.
func NewWatch(client fleetviewv1.QueryServiceClient) http.Handler {
	return &watchHandler{client: client}
}

func (h *watchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		WriteError(w, status.Error(codes.Unimplemented, "watch is GET only"))
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/watch/"), "/")
	if len(parts) != 3 {
		WriteError(w, errors.Join(query.ErrInvalid, errors.New("path must be /v1/watch/{group}/{version}/{resource}")))
		return
	}
	req := &fleetviewv1.WatchRequest{Group: parts[0], Version: parts[1], Resource: parts[2]}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	req.Structured = false // the events carry the stored bytes
	stream, err := h.client.Watch(ctx, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusOK)
			return
		}
		WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var b []byte
	for ev := first; ; {
		b = appendWatchEvent(b[:0], ev)
		if _, err := w.Write(b); err != nil {
			return
		}
		_ = rc.Flush()
		if ev, err = stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				_, st := StatusBody(err)
				b, _ := json.Marshal(map[string]any{"type": "ERROR", "object": st})
				_, _ = w.Write(append(b, '\n'))
				_ = rc.Flush()
			}
			return
		}
	}
}

// appendWatchEvent writes one event line in the gateway's shape, with the
// object as its stored bytes.
func appendWatchEvent(b []byte, ev *fleetviewv1.WatchEvent) []byte {
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, ev.GetType())
	if o := ev.GetRawObject(); len(o) > 0 {
		b = append(b, `,"object":`...)
		b = append(b, o...)
	}
	if c := ev.GetCluster(); c != "" {
		b = append(b, `,"cluster":`...)
		b = strconv.AppendQuote(b, c)
	}
	b = append(b, `,"resourceVersion":`...)
	b = strconv.AppendQuote(b, ev.GetResourceVersion())
	if ev.GetInitialEventsEnd() {
		b = append(b, `,"initialEventsEnd":true`...)
	}
	return append(b, "}\n"...)
}
