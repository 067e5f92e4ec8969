package rest

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// historyHandler serves the history's reads (issue #48) from the stored
// bytes: GET /v1/changes ({"changes":[entry...],"continue":...}) and GET
// /v1/revisions/{group}/{version}/{resource}/{name}
// ({"revisions":[entry...],"continue":...}). An entry's object and patch
// are written as the JSON objects they are (the gateway would write
// bytes as base64), its time as RFC 3339 with nanoseconds and its seq as a
// number. Both call the service through the in-process client, so the
// interceptors apply.
type historyHandler struct {
	client  fleetviewv1.QueryServiceClient
	gateway http.Handler
}

// NewHistory serves /v1/changes and /v1/revisions/ through client, any
// other method or path through gateway.
func NewHistory(client fleetviewv1.QueryServiceClient, gateway http.Handler) http.Handler {
	return &historyHandler{client: client, gateway: gateway}
}

func (h *historyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.gateway.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/v1/changes" {
		req := &fleetviewv1.ListChangesRequest{}
		ctx, err := fromHTTP(r, req)
		if err != nil {
			WriteError(w, err)
			return
		}
		req.Structured = false
		resp, err := h.client.ListChanges(ctx, req, grpc.MaxCallRecvMsgSize(1<<30))
		if err != nil {
			WriteError(w, err)
			return
		}
		writeRawJSON(w, appendEntries(nil, "changes", resp.GetChanges(), resp.GetContinue()))
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/revisions/"), "/")
	if !strings.HasPrefix(r.URL.Path, "/v1/revisions/") || len(parts) != 4 {
		h.gateway.ServeHTTP(w, r)
		return
	}
	req := &fleetviewv1.ListRevisionsRequest{}
	ctx, err := fromHTTP(r, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	req.Group, req.Version, req.Resource, req.Name, req.Structured = parts[0], parts[1], parts[2], parts[3], false
	resp, err := h.client.ListRevisions(ctx, req, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		WriteError(w, err)
		return
	}
	writeRawJSON(w, appendEntries(nil, "revisions", resp.GetRevisions(), resp.GetContinue()))
}

// appendEntries writes {"<member>":[entry...],"continue":...}.
func appendEntries(b []byte, member string, es []*fleetviewv1.HistoryEntry, cont string) []byte {
	n := 64
	for _, e := range es {
		n += 384 + len(e.GetRawObject()) + len(e.GetRawPatch())
	}
	b = append(make([]byte, 0, n), b...)
	b = append(b, '{')
	b = strconv.AppendQuote(b, member)
	b = append(b, ":["...)
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEntry(b, e)
	}
	b = append(b, `],"continue":`...)
	b = strconv.AppendQuote(b, cont)
	return append(b, '}')
}

func appendEntry(b []byte, e *fleetviewv1.HistoryEntry) []byte {
	str := func(name, v string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendQuote(b, v)
	}
	b = append(b, `{"cluster":`...)
	b = strconv.AppendQuote(b, e.GetCluster())
	str("group", e.GetGroup())
	str("version", e.GetVersion())
	str("resource", e.GetResource())
	if e.GetKind() != "" {
		str("kind", e.GetKind())
	}
	str("namespace", e.GetNamespace())
	str("name", e.GetName())
	str("uid", e.GetUid())
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.GetSeq(), 10)
	b = append(b, `,"time":"`...)
	b = e.GetTime().AsTime().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	str("type", e.GetType())
	str("resourceVersion", e.GetResourceVersion())
	str("manager", e.GetManager())
	str("operation", e.GetOperation())
	str("subresource", e.GetSubresource())
	b = append(b, `,"labels":`...)
	b = appendLabels(b, e.GetLabels())
	if o := e.GetRawObject(); len(o) > 0 {
		b = append(b, `,"object":`...)
		b = append(b, o...)
	}
	if p := e.GetRawPatch(); len(p) > 0 {
		b = append(b, `,"patch":`...)
		b = append(b, p...)
	}
	return append(b, '}')
}

// appendLabels writes labels as encoding/json does (keys sorted, "{}" for
// none). Kubernetes' label keys and values need no escaping, so they are
// copied between quotes without json.Marshal's reflection and sorting
// allocations; anything else goes through json.Marshal.
func appendLabels(b []byte, labels map[string]string) []byte {
	var ks [16]string
	keys := ks[:0]
	for k, v := range labels {
		if !plainJSON(k) || !plainJSON(v) {
			l, err := json.Marshal(labels)
			if err != nil {
				return append(b, "{}"...)
			}
			return append(b, l...)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, labels[k]...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// plainJSON reports whether s is written between quotes unchanged by
// encoding/json: printable ASCII other than '"', '\\' and its HTML escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
