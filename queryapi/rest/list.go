package rest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// listHandler serves GET /v1/resources/{group}/{version}/{resource} (List)
// by writing the stored JSON of each object straight into the answer: the
// grpc-gateway path converts every object JSON -> Struct -> JSON, which
// dominated large lists. The response has the gateway's members
// ({"resourceVersion":...,"continue":...,"remainingItemCount":"N",
// "items":[...]}), the list's metadata first, as Kubernetes writes it, so
// a client paging through can read the continue token without reading
// the items. It calls List through the in-process client, so the
// interceptors apply; every other /v1/resources/ path goes to the gateway.
type listHandler struct {
	client  fleetviewv1.QueryServiceClient
	gateway http.Handler
}

// NewList serves /v1/resources/ through client, every path but List and
// Get through gateway.
func NewList(client fleetviewv1.QueryServiceClient, gateway http.Handler) http.Handler {
	return &listHandler{client: client, gateway: gateway}
}

func (h *listHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/resources/"), "/")
	if r.Method == http.MethodGet && len(parts) == 4 {
		h.serveGet(w, r, parts)
		return
	}
	if r.Method != http.MethodGet || len(parts) != 3 {
		h.gateway.ServeHTTP(w, r)
		return
	}
	req := &fleetviewv1.ListRequest{Group: parts[0], Version: parts[1], Resource: parts[2]}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	req.Structured = false // REST answers JSON: the stored bytes either way
	resp, err := h.client.List(ctx, req, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		WriteError(w, err)
		return
	}
	writeRawList(w, resp)
}

// restListChunk is how much of a REST list is written at a time: the
// answer is streamed from one reused buffer, not copied whole (tens of MB
// for 15k Pods; measured: docs/benchmarks/query.md#the-rest-list-streams-10-of-10-2026-12-01-1744-utc)
// into a new one first, as the Kubernetes path's list is.
const restListChunk = 256 << 10

// writeRawList answers 200 with the list's members and its stored items,
// with the exact Content-Length.
func writeRawList(w http.ResponseWriter, resp *fleetviewv1.ListResponse) {
	items := resp.GetRawItems()
	b := make([]byte, 0, restListChunk+64<<10)
	b = append(b, `{"resourceVersion":`...)
	b = strconv.AppendQuote(b, resp.GetResourceVersion())
	b = append(b, `,"continue":`...)
	b = strconv.AppendQuote(b, resp.GetContinue())
	if resp.RemainingItemCount != nil {
		b = append(b, `,"remainingItemCount":"`...)
		b = strconv.AppendInt(b, resp.GetRemainingItemCount(), 10)
		b = append(b, '"')
	}
	b = append(b, `,"items":[`...)
	n := len(b) + len("]}") + max(len(items)-1, 0) // the commas
	for _, it := range items {
		n += len(it)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		if len(b)+len(it) > cap(b) {
			if _, err := w.Write(b); err != nil {
				return // the client went away
			}
			b = b[:0]
		}
		b = append(b, it...)
	}
	_, _ = w.Write(append(b, "]}"...))
}

// serveGet answers GET /v1/resources/{group}/{version}/{resource}/{name}
// in the gateway's shape ({"object":{...},"cluster":...}) from the stored
// bytes (Get raw): the gateway would convert JSON -> Struct -> JSON.
func (h *listHandler) serveGet(w http.ResponseWriter, r *http.Request, parts []string) {
	req := &fleetviewv1.GetRequest{Group: parts[0], Version: parts[1], Resource: parts[2], Name: parts[3]}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	req.Structured = false
	resp, err := h.client.Get(ctx, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	b := make([]byte, 0, len(resp.GetRawObject())+64)
	b = append(b, `{"object":`...)
	b = append(b, resp.GetRawObject()...)
	b = append(b, `,"cluster":`...)
	b = strconv.AppendQuote(b, resp.GetCluster())
	b = append(b, '}')
	writeRawJSON(w, b)
}

// fromHTTP fills a gRPC request from an HTTP request's query parameters
// (as the gateway would) and forwards the caller's Authorization header, so
// the paths written around the gateway pass the same interceptors.
func fromHTTP(r *http.Request, req proto.Message) (context.Context, error) {
	if err := runtime.PopulateQueryParameters(req, r.URL.Query(), utilities.NewDoubleArray(nil)); err != nil {
		return nil, errors.Join(query.ErrInvalid, err)
	}
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	return ctx, nil
}

// writeRawJSON answers 200 with a JSON body built from stored bytes.
func writeRawJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
