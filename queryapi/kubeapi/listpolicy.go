package kubeapi

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// ListPolicy says how many objects one answer to a paged list holds. The
// Kubernetes API lets a server answer more than limit ("Servers may
// choose not to support the limit argument and will return all of the
// available results. If limit is specified and the continue field is
// empty, clients may assume that no more results are available.",
// ListOptions.limit), and kubectl and client-go's pager follow continue
// without counting items. Under the budget policy (the default) a list
// asking for a page of BudgetMinLimit or more (kubectl's and the pager's
// 500), or for no limit, is answered with every object up to the budget,
// written as it is read from the cache, and a continue token right after
// the last object written; strict paging (Strict) answers at most limit,
// for clients that count. docs/api.md, "Paged lists".
type ListPolicy struct {
	// Strict answers every list with at most its limit objects.
	Strict bool
	// BudgetObjects and BudgetBytes bound one answer under the budget
	// policy: it ends once it holds BudgetObjects objects (exactly) or
	// has written BudgetBytes (after the read page that passed it). 0:
	// the defaults.
	BudgetObjects int64
	BudgetBytes   int64
}

const (
	// DefaultListBudgetObjects holds a fleet of 150k Pods (the query
	// benchmark's) in one answer with room to spare.
	DefaultListBudgetObjects = 250_000
	// DefaultListBudgetBytes bounds what one answer makes a client hold:
	// 150k Pods fit as kubectl's Table, and take two answers as a PodList
	// (measured: docs/benchmarks/query.md#figures-behind-code-comments).
	DefaultListBudgetBytes = 256 << 20
	// BudgetMinLimit is the smallest limit the budget applies to: a client
	// asking for fewer objects (a probe with limit=1, a UI's page of 50)
	// is taken to count them, and is answered strictly.
	BudgetMinLimit = 500
	// listReadPage is how many objects a budget answer reads from the
	// query service at a time: what the hub holds of an answer at once.
	listReadPage = 5000
	// protoListPage is what a protobuf list under the budget answers
	// (the client's limit when larger, BudgetObjects when smaller):
	// Kubernetes' protobuf list carries its length before its items, so
	// the answer is decoded and held whole before it is written, and
	// cannot be streamed like JSON.
	protoListPage = 10_000
)

// Validate reports a negative budget.
func (p ListPolicy) Validate() error {
	if p.BudgetObjects < 0 || p.BudgetBytes < 0 {
		return fmt.Errorf("%w: list budget of %d objects and %d bytes: must not be negative (0: the defaults)", ErrInvalidListPolicy, p.BudgetObjects, p.BudgetBytes)
	}
	return nil
}

func (p ListPolicy) withDefaults() ListPolicy {
	if p.BudgetObjects == 0 {
		p.BudgetObjects = DefaultListBudgetObjects
	}
	if p.BudgetBytes == 0 {
		p.BudgetBytes = DefaultListBudgetBytes
	}
	return p
}

// WithListPolicy sets how paged lists are answered (the default: the
// budget policy with the default budget).
func WithListPolicy(p ListPolicy) Option {
	return func(h *Handler) { h.lists = p.withDefaults() }
}

// budgeted reports whether the list p asks for is answered under the
// budget.
func (p ListPolicy) budgeted(lp *params) bool {
	return !p.Strict && (lp.limit == 0 || lp.limit >= BudgetMinLimit)
}

// firstRead is the limit of the query service call that starts a budget
// answer.
func (p ListPolicy) firstRead(lp *params) int64 {
	if lp.proto {
		return min(max(lp.limit, protoListPage), p.BudgetObjects)
	}
	return min(listReadPage, p.BudgetObjects)
}

// listRequest is the query service's request for the list req and p ask
// for (limit and continue the client's).
func listRequest(req *request, c cached, p *params) *fleetviewv1.ListRequest {
	lr := &fleetviewv1.ListRequest{Group: grpcGroup(c.gvr.Group), Version: c.gvr.Version, Resource: c.gvr.Resource,
		Namespace: req.namespace, LabelSelector: p.labelSelector, FieldSelector: p.fieldSelector,
		Clusters: clustersOf(req), Limit: p.limit, Continue: p.cont, ResourceVersion: p.resourceVersion,
		ResourceVersionMatch: string(p.resourceVersionMatch), AsOf: query.FormatAsOf(p.asOf)}
	if p.cont != "" {
		// A continue token pins its snapshot; clients may repeat the
		// list's resourceVersion beside it.
		lr.ResourceVersion = ""
	}
	return lr
}

// streamList writes a budget answer whose first read page (first) did
// not end the list: the pages after it are read with its continue token,
// from the same snapshot, and written as they are read, one read page
// held at a time. The list's metadata (the first page's resourceVersion,
// the last page's continue token and remaining count) is known only at
// the end, so it is written after the items: a JSON object's members
// have no order, and every Kubernetes client decodes the answer whole.
func (h *Handler) streamList(ctx context.Context, w http.ResponseWriter, c cached, p *params, lr *fleetviewv1.ListRequest, first *fleetviewv1.ListResponse) {
	w.Header().Set("Content-Type", "application/json")
	lb := h.newListBody(w, c, p.table, p.includeObject)
	lb.start(nil)
	// The first read's version, not the first read: holding it for the
	// whole answer kept a second read of objects live beside the one
	// being written (and the one being read), which the Go heap's goal
	// doubles in the hub's RSS.
	rv := first.GetResourceVersion()
	resp, read := first, int64(0)
	first = nil
	reuse := query.ReuseFrom(ctx)
	for {
		if err := lb.add(resp.GetRawItems(), resp.GetRawCells(), resp.GetRawRowSpans()); err != nil {
			return // the client is gone
		}
		read += int64(len(resp.GetRawItems()))
		// add copied every object of resp into the answer: the next
		// read may reuse their memory (nothing reads resp's items again).
		reuse.Written()
		if resp.GetContinue() == "" || read >= h.lists.BudgetObjects || lb.cw.written() >= h.lists.BudgetBytes {
			break
		}
		next := &fleetviewv1.ListRequest{Group: lr.Group, Version: lr.Version, Resource: lr.Resource, Namespace: lr.Namespace,
			LabelSelector: lr.LabelSelector, FieldSelector: lr.FieldSelector, Clusters: lr.Clusters,
			Limit: min(listReadPage, h.lists.BudgetObjects-read), Continue: resp.GetContinue(), AsOf: lr.AsOf}
		var err error
		if resp, err = h.query.List(ctx, next, grpc.MaxCallRecvMsgSize(1<<30)); err != nil {
			// The answer's status is sent: its body is left without its
			// end, so no client can decode it as a complete list.
			h.log.Warn("kubeapi: list ended mid-answer", "resource", c.gvr.String(), "err", err)
			_ = lb.cw.flush()
			return
		}
	}
	lm := listMeta(resp)
	lm.ResourceVersion = rv
	_ = lb.end(&lm)
}

// listMeta is the list metadata of one query service answer.
func listMeta(resp *fleetviewv1.ListResponse) metav1.ListMeta {
	lm := metav1.ListMeta{ResourceVersion: resp.GetResourceVersion(), Continue: resp.GetContinue()}
	if resp.RemainingItemCount != nil {
		n := resp.GetRemainingItemCount()
		lm.RemainingItemCount = &n
	}
	return lm
}

// chunkWriter writes an answer in writes of about listChunk from one
// reused buffer, counting what it wrote.
type chunkWriter struct {
	w   io.Writer
	b   []byte
	n   int64
	err error
}

func (cw *chunkWriter) flush() error {
	if cw.err == nil {
		_, cw.err = cw.w.Write(cw.b)
	}
	cw.n += int64(len(cw.b))
	cw.b = cw.b[:0]
	return cw.err
}

// written is what the answer holds so far, buffered or written.
func (cw *chunkWriter) written() int64 { return cw.n + int64(len(cw.b)) }

// listBody writes one JSON list answer: a Table (kubectl's) or a
// <Kind>List, its items added a read page at a time.
type listBody struct {
	h     *Handler // reports rows left out (nil: a <Kind>List, none)
	c     cached
	t     *tableWriter // nil: a <Kind>List
	cw    chunkWriter
	first bool
	row   rawjson.RowSpans
}

func (h *Handler) newListBody(w io.Writer, c cached, table bool, include metav1.IncludeObjectPolicy) *listBody {
	lb := &listBody{h: h, c: c, cw: chunkWriter{w: w, b: make([]byte, 0, listChunk+64<<10)}, first: true}
	if table {
		lb.t = newTableWriter(c, include)
	}
	return lb
}

// start writes the answer up to its first item, with its metadata when
// lm is given (else end writes it).
func (lb *listBody) start(lm *metav1.ListMeta) {
	if lb.t != nil {
		lb.cw.b = lb.t.appendHead(lb.cw.b, lm)
		return
	}
	lb.cw.b = appendListHead(lb.cw.b, lb.c, lm)
}

// add writes the stored items (with their cells and row spans, paired by
// index when present). A Table row that cannot be written is left out
// and reported, so one cluster's object cannot fail the Table of every
// cluster.
func (lb *listBody) add(items, cells [][]byte, spans []uint32) error {
	for i, it := range items {
		mark := len(lb.cw.b)
		if !lb.first {
			lb.cw.b = append(lb.cw.b, ',')
		}
		if lb.t == nil {
			lb.cw.b = appendItem(lb.cw.b, lb.c, it)
		} else {
			var cl []byte
			if len(cells) == len(items) {
				cl = cells[i]
			}
			var rs *rawjson.RowSpans
			if len(spans) == 8*len(items) {
				lb.row = rawjson.RowSpansAt(spans[8*i : 8*i+8])
				rs = &lb.row
			}
			var err error
			if lb.cw.b, err = lb.t.appendRow(lb.cw.b, it, cl, rs); err != nil {
				lb.cw.b = lb.cw.b[:mark]
				lb.h.skip(it, "a Table", err)
				continue
			}
		}
		lb.first = false
		if len(lb.cw.b) >= listChunk {
			if err := lb.cw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// end closes the answer, writing its metadata last when lm is given.
func (lb *listBody) end(lm *metav1.ListMeta) error {
	lb.cw.b = append(lb.cw.b, ']')
	if lm != nil {
		lb.cw.b = append(lb.cw.b, `,"metadata":`...)
		lb.cw.b = appendListMeta(lb.cw.b, *lm, lb.t == nil)
	}
	lb.cw.b = append(lb.cw.b, "}\n"...)
	return lb.cw.flush()
}
