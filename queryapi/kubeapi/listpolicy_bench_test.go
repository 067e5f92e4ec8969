package kubeapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// fleetQuery answers reads of a fleet of n Pods from one prebuilt
// window of distinct stored Pods (repeated), as the in-process query
// service hands its answers over: the slices are shared, not copied, so
// what a benchmark counts is the Kubernetes API's own cost.
type fleetQuery struct {
	fakeQuery
	n            int
	items, cells [][]byte
	spans        []uint32
}

func newFleetQuery(b testing.TB, n, window int) *fleetQuery {
	q := &fleetQuery{n: n, items: make([][]byte, window), cells: make([][]byte, window), spans: make([]uint32, 0, 8*window)}
	for i := range q.items {
		q.items[i] = podjson.Pod("member1", i, 7)
		q.cells[i] = fmt.Appendf(nil, `[%q,"1/1","Running","0","3h","10.244.0.%d","node-%03d"]`, podjson.PodName(i), i%256, i%200)
		r, err := rawjson.FindRowSpans(q.items[i], clusterAnnotation)
		if err != nil {
			b.Fatal(err)
		}
		q.spans = r.Offsets(q.spans)
	}
	return q
}

func (q *fleetQuery) List(_ context.Context, in *fleetviewv1.ListRequest, _ ...grpc.CallOption) (*fleetviewv1.ListResponse, error) {
	from := 0
	if c := in.GetContinue(); c != "" {
		from, _ = strconv.Atoi(c)
	}
	to := q.n
	if l := int(in.GetLimit()); l > 0 {
		to = min(from+l, q.n)
	}
	w := len(q.items)
	resp := &fleetviewv1.ListResponse{ResourceVersion: "rv1"}
	for i := from; i < to; {
		k := min(to-i, w-i%w)
		resp.RawItems = append(resp.RawItems, q.items[i%w:i%w+k]...)
		resp.RawCells = append(resp.RawCells, q.cells[i%w:i%w+k]...)
		resp.RawRowSpans = append(resp.RawRowSpans, q.spans[8*(i%w):8*(i%w+k)]...)
		i += k
	}
	if to < q.n {
		resp.Continue = strconv.Itoa(to)
		left := int64(q.n - to)
		resp.RemainingItemCount = &left
	}
	return resp, nil
}

// rowCounter is a ResponseWriter that keeps only the answer's head and
// tail (where its metadata is) and counts its rows, allocating nothing
// once warm: the client, not the hub, holds an answer.
type rowCounter struct {
	h          http.Header
	head, tail []byte
	rows       int
}

const (
	rowMark = `{"cells":`
	keep    = 4 << 10
)

func (c *rowCounter) reset() {
	c.h, c.head, c.tail, c.rows = http.Header{}, c.head[:0], c.tail[:0], 0
}

func (c *rowCounter) Header() http.Header { return c.h }
func (c *rowCounter) WriteHeader(int)     {}
func (c *rowCounter) Write(p []byte) (int, error) {
	if n := keep - len(c.head); n > 0 {
		c.head = append(c.head, p[:min(n, len(p))]...)
	}
	// A mark split across writes is counted from the joined tail.
	seam := len(c.tail)
	c.tail = append(c.tail, p[:min(len(p), len(rowMark))]...)
	c.rows += bytes.Count(c.tail[max(0, seam-len(rowMark)+1):], []byte(rowMark))
	c.rows += bytes.Count(p, []byte(rowMark)) - bytes.Count(p[:min(len(p), len(rowMark))], []byte(rowMark))
	if len(p) >= keep {
		c.tail = append(c.tail[:0], p[len(p)-keep:]...)
	} else {
		c.tail = append(c.tail[:seam], p...)
		if len(c.tail) > keep {
			c.tail = c.tail[:copy(c.tail, c.tail[len(c.tail)-keep:])]
		}
	}
	return len(p), nil
}

// continueOf is the answer's continue token ("" when it is the last),
// from its metadata: before its rows (strict answers) or after them
// (streamed answers), never from an object's contents.
func (c *rowCounter) continueOf() string {
	var meta []byte
	if i := bytes.Index(c.head, []byte(`"rows":[`)); i >= 0 {
		meta = c.head[:i]
	}
	if i := bytes.LastIndex(c.tail, []byte(`],"metadata":{`)); i >= 0 {
		meta = c.tail[i:]
	}
	const m = `"continue":"`
	i := bytes.Index(meta, []byte(m))
	if i < 0 {
		return ""
	}
	rest := meta[i+len(m):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}

// BenchmarkTableAnswer is kubectl's `get pods -A` of a 150k-Pod fleet
// (a Table asked 500 a page, answered under the list budget in one
// answer read 5,000 at a time), against the same fleet paged strictly
// (300 answers of 500): the hub's allocations per whole listing, which
// with the Go heap's live size set its RSS during the answer (#44).
func BenchmarkTableAnswer(b *testing.B) {
	const n = 150_000
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	q := newFleetQuery(b, n, 5000)
	for _, tc := range []struct {
		name   string
		policy ListPolicy
	}{{"budget", ListPolicy{}}, {"strict", ListPolicy{Strict: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			h := New(q, fakeCatalog(), nil, nil, WithListPolicy(tc.policy))
			w := &rowCounter{}
			b.ReportAllocs()
			for b.Loop() {
				cont, rows := "", 0
				for first := true; first || cont != ""; first = false {
					r := httptest.NewRequest("GET", "/api/v1/pods?limit=500&continue="+url.QueryEscape(cont), nil)
					r.Header.Set("Accept", accept)
					w.reset()
					h.ServeHTTP(w, r)
					rows += w.rows
					cont = w.continueOf()
				}
				if rows != n {
					b.Fatalf("%d rows, want %d", rows, n)
				}
			}
		})
	}
}

// releaseQuery is fleetQuery that reports when its first answer's page
// is collected, and on its third read checks that it has been: a budget
// answer holds the read it writes, not every read since the first.
type releaseQuery struct {
	*fleetQuery
	reads     int
	collected chan struct{}
	held      bool
}

func (q *releaseQuery) List(ctx context.Context, in *fleetviewv1.ListRequest, o ...grpc.CallOption) (*fleetviewv1.ListResponse, error) {
	q.reads++
	if q.reads == 3 {
		runtime.GC()
		select {
		case <-q.collected:
		case <-time.After(5 * time.Second):
			q.held = true
		}
	}
	resp, err := q.fleetQuery.List(ctx, in, o...)
	if q.reads == 1 {
		runtime.AddCleanup(resp, func(c chan struct{}) { close(c) }, q.collected)
	}
	return resp, err
}

// TestStreamListReleasesReads: the first read of a budget answer (its
// objects) is not kept to the answer's end for its resourceVersion: it
// kept a whole 5,000-Pod read live beside the read being written, which
// the Go heap's goal doubles in the hub's RSS (#44; measured:
// docs/benchmarks/query.md#figures-behind-code-comments).
func TestStreamListReleasesReads(t *testing.T) {
	q := &releaseQuery{fleetQuery: newFleetQuery(t, 20_000, 100), collected: make(chan struct{})}
	h := New(q, fakeCatalog(), nil, nil)
	r := httptest.NewRequest("GET", "/api/v1/pods?limit=500", nil)
	r.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	w := &rowCounter{}
	w.reset()
	h.ServeHTTP(w, r)
	if w.rows != 20_000 || q.reads != 4 {
		t.Fatalf("%d rows in %d reads, want 20000 in 4", w.rows, q.reads)
	}
	if q.held {
		t.Error("the first read was still live at the third")
	}
}
