package rest

import (
	"net/http"
	"strconv"

	"google.golang.org/grpc"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// searchHandler serves GET /v1/search in the gateway's shape
// ({"items":[{"gvr":{...},"cluster":...,"object":{...}}],"continue":...,
// "resourceVersion":...}) from the stored bytes.
type searchHandler struct {
	client  fleetviewv1.QueryServiceClient
	gateway http.Handler
}

// NewSearch serves GET /v1/search through client, anything else through
// gateway.
func NewSearch(client fleetviewv1.QueryServiceClient, gateway http.Handler) http.Handler {
	return &searchHandler{client: client, gateway: gateway}
}

func (h *searchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/search" {
		h.gateway.ServeHTTP(w, r)
		return
	}
	req := &fleetviewv1.SearchRequest{}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	req.Structured = false
	resp, err := h.client.Search(ctx, req, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		WriteError(w, err)
		return
	}
	n := 128
	for _, it := range resp.GetItems() {
		n += len(it.GetRawObject()) + 128
	}
	b := make([]byte, 0, n)
	b = append(b, `{"items":[`...)
	for i, it := range resp.GetItems() {
		if i > 0 {
			b = append(b, ',')
		}
		g := it.GetGvr()
		b = append(b, `{"gvr":{"group":`...)
		b = strconv.AppendQuote(b, g.GetGroup())
		b = append(b, `,"version":`...)
		b = strconv.AppendQuote(b, g.GetVersion())
		b = append(b, `,"resource":`...)
		b = strconv.AppendQuote(b, g.GetResource())
		b = append(b, `},"cluster":`...)
		b = strconv.AppendQuote(b, it.GetCluster())
		b = append(b, `,"object":`...)
		b = append(b, it.GetRawObject()...)
		b = append(b, '}')
	}
	b = append(b, `],"continue":`...)
	b = strconv.AppendQuote(b, resp.GetContinue())
	b = append(b, `,"resourceVersion":`...)
	b = strconv.AppendQuote(b, resp.GetResourceVersion())
	b = append(b, '}')
	writeRawJSON(w, b)
}
