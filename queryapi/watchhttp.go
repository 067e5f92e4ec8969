package queryapi

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

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

func (h *watchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, status501("watch is GET only"))
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/watch/"), "/")
	if len(parts) != 3 {
		writeError(w, errors.Join(query.ErrInvalid, errors.New("path must be /v1/watch/{group}/{version}/{resource}")))
		return
	}
	req := &fleetviewv1.WatchRequest{Group: parts[0], Version: parts[1], Resource: parts[2]}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	stream, err := h.client.Watch(ctx, req)
	if err != nil {
		writeError(w, err)
		return
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusOK)
			return
		}
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	m := protojson.MarshalOptions{}
	for ev := first; ; {
		b, err := m.Marshal(ev)
		if err != nil {
			return
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return
		}
		_ = rc.Flush()
		if ev, err = stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				_, st := statusBody(err)
				b, _ := jsonMarshal(map[string]any{"type": "ERROR", "object": st})
				_, _ = w.Write(append(b, '\n'))
				_ = rc.Flush()
			}
			return
		}
	}
}
