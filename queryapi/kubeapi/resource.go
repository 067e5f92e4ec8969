package kubeapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func (h *Handler) serveResource(ctx context.Context, w http.ResponseWriter, req *request) {
	gr := schema.GroupResource{Group: req.gv.Group, Resource: req.resource}
	fail := func(err error) { h.writeStatus(w, req.r, toKubeStatus(err, gr, req.name)) }
	c, err := h.lookup(req)
	if err != nil {
		fail(err)
		return
	}
	if !c.namespaced && req.namespace != "" {
		fail(fmt.Errorf("%w: %s is cluster-scoped", ErrUnknownResource, gr))
		return
	}
	// Negotiated before the parameters are read, as kube-apiserver does.
	accept := req.r.Header.Get("Accept")
	f, err := negotiate(accept, strings.Contains(accept, "protobuf") && h.proto.knows(c))
	if err != nil {
		fail(err)
		return
	}
	p, err := parseParams(req.r)
	if err != nil {
		fail(err)
		return
	}
	p.table, p.proto = f == asTable, f == asProtobuf
	switch {
	case p.watch:
		h.serveWatch(ctx, w, req, c, p)
	case req.name != "":
		h.serveGet(ctx, w, req, c, p)
	default:
		h.serveList(ctx, w, req, c, p)
	}
}

// grpcGroup is g as the gRPC API's requests spell it.
func grpcGroup(g string) string { return kubepath.GroupName(g) }

func clustersOf(req *request) []string {
	if req.cluster == "" {
		return nil
	}
	return []string{req.cluster}
}

func (h *Handler) serveList(ctx context.Context, w http.ResponseWriter, req *request, c cached, p *params) {
	lr := listRequest(req, c, p)
	budget := h.lists.budgeted(p)
	if budget {
		lr.Limit = h.lists.firstRead(p)
		if !p.proto {
			// A streamed answer writes each read before the next: the
			// store copies the next read into the memory of those
			// written (streamList says when) rather than new memory,
			// the garbage that grew the hub's heap in a whole-fleet
			// listing (docs/benchmarks/query.md). The answer is written
			// whole when serveList returns (the query client answers
			// synchronously), so its memory serves the next answer.
			reuse, _ := h.reuses.Get().(*query.Reuse)
			if reuse == nil {
				reuse = &query.Reuse{}
			}
			defer func() {
				reuse.Written()
				h.reuses.Put(reuse)
			}()
			ctx = query.WithReuse(ctx, reuse)
		}
	}
	resp, err := h.query.List(ctx, lr, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		h.writeStatus(w, req.r, toKubeStatus(err, c.gvr.GroupResource(), ""))
		return
	}
	lm := listMeta(resp)
	switch {
	case p.proto:
		h.writeProtoList(w, req, c, lm, resp.GetRawItems())
	case budget && resp.GetContinue() != "" && int64(len(resp.GetRawItems())) < h.lists.BudgetObjects:
		h.streamList(ctx, w, c, p, lr, resp)
	case p.table:
		w.Header().Set("Content-Type", "application/json")
		_ = h.writeTable(w, c, lm, p.includeObject, resp.GetRawItems(), resp.GetRawCells(), resp.GetRawRowSpans())
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = writeList(w, c, lm, resp.GetRawItems())
	}
}

// writeProtoList answers the stored items as a protobuf <Kind>List. An
// item that does not decode is left out and reported (skip), as a Table's
// row is: one cluster's object cannot fail the list of every cluster.
func (h *Handler) writeProtoList(w http.ResponseWriter, req *request, c cached, lm metav1.ListMeta, items [][]byte) {
	list, err := h.proto.list(c, lm, items, func(raw []byte, err error) { h.skip(raw, "a list", err) })
	if err != nil {
		h.writeStatus(w, req.r, toKubeStatus(err, c.gvr.GroupResource(), ""))
		return
	}
	w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
	_ = h.proto.writeList(w, list)
}

// listChunk is how much of a list is written at a time: the answer is
// streamed from one reused buffer instead of being copied whole into a
// new one (tens of MB for 15k Pods; measured:
// docs/benchmarks/query.md#every-target-met-2026-12-01-1157-utc) first.
const listChunk = 256 << 10

// writeTable writes a Table of the stored items and their cells (cells
// pair with items by index when present), streamed like writeList. An item
// whose row cannot be written is left out and reported (skip), so one
// cluster's object cannot fail the Table of every cluster.
func (h *Handler) writeTable(w io.Writer, c cached, lm metav1.ListMeta, include metav1.IncludeObjectPolicy, items, cells [][]byte, spans []uint32) error {
	lb := h.newListBody(w, c, true, include)
	lb.start(&lm)
	if err := lb.add(items, cells, spans); err != nil {
		return err
	}
	return lb.end(nil)
}

// writeList writes a <Kind>List around the stored item bytes.
func writeList(w io.Writer, c cached, lm metav1.ListMeta, items [][]byte) error {
	lb := (*Handler)(nil).newListBody(w, c, false, "")
	lb.start(&lm)
	if err := lb.add(items, nil, nil); err != nil {
		return err
	}
	return lb.end(nil)
}

// appendListHead writes a <Kind>List up to its first item, its metadata
// first when lm is given (else the answer's end writes it, listBody.end).
func appendListHead(b []byte, c cached, lm *metav1.ListMeta) []byte {
	b = append(b, `{"kind":`...)
	b = strconv.AppendQuote(b, c.kind+"List")
	b = append(b, `,"apiVersion":`...)
	b = strconv.AppendQuote(b, c.gvr.GroupVersion().String())
	if lm != nil {
		b = append(b, `,"metadata":`...)
		b = appendListMeta(b, *lm, true)
	}
	return append(b, `,"items":[`...)
}

// appendListMeta writes a list's metadata object; its resourceVersion
// even when empty when emptyRV (a <Kind>List's always has one; a Table of
// one object has none).
func appendListMeta(b []byte, lm metav1.ListMeta, emptyRV bool) []byte {
	b = append(b, '{')
	sep := false
	if lm.ResourceVersion != "" || emptyRV {
		b = append(b, `"resourceVersion":`...)
		b = strconv.AppendQuote(b, lm.ResourceVersion)
		sep = true
	}
	if lm.Continue != "" {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"continue":`...)
		b = strconv.AppendQuote(b, lm.Continue)
		sep = true
	}
	if lm.RemainingItemCount != nil {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"remainingItemCount":`...)
		b = strconv.AppendInt(b, *lm.RemainingItemCount, 10)
	}
	return append(b, '}')
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
		Namespace: req.namespace, Name: req.name, Cluster: req.cluster, AsOf: query.FormatAsOf(p.asOf)})
	if err != nil {
		st := toKubeStatus(err, c.gvr.GroupResource(), req.name)
		if h.act != nil && st.Code == http.StatusConflict && req.cluster == "" {
			// kubectl reads before it labels, annotates or edits: the
			// write it is about to make needs the cluster named.
			st.Message += "; name the cluster: " + "/clusters/{cluster}" + kubepath.ResourceRequest(c.gvr.GroupVersion(), req.namespace, req.resource, req.name).Path()
		}
		h.writeStatus(w, req.r, st)
		return
	}
	if p.table {
		t := newTableWriter(c, p.includeObject)
		b, err := t.appendRow(t.appendHead(nil, &metav1.ListMeta{}), resp.GetRawObject(), resp.GetRawCells(), nil)
		if err != nil {
			h.writeStatus(w, req.r, toKubeStatus(err, c.gvr.GroupResource(), req.name))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, tableTail...))
		return
	}
	if p.proto {
		// One object that does not decode is the whole answer: a 500,
		// as a Table of it is, and reported like a skipped list item.
		obj, err := h.proto.object(c, resp.GetRawObject())
		if err == nil {
			err = h.proto.writeProto(w, http.StatusOK, obj)
		}
		if err != nil {
			h.skip(resp.GetRawObject(), "a get", err)
			h.writeStatus(w, req.r, toKubeStatus(err, c.gvr.GroupResource(), req.name))
		}
		return
	}
	// The stored bytes, as in lists: no JSON -> Struct -> JSON.
	b := appendItem(nil, c, resp.GetRawObject())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
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
