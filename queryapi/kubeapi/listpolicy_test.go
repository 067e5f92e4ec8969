package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// pagingQuery pages n Pods as the query service does: a page of at most
// the request's limit (0: all), a continue token naming the next item,
// and each call's resourceVersion numbered, so an answer built of several
// reads shows which read's it carries. failAt makes that call (1-based)
// fail.
//
// A read whose context carries a query.Reuse copies its items into the
// chunks it lends, as the store does, so an answer that wrote an item
// after saying it was written (Written) shows another item in its place;
// lent counts the lends of each chunk, reuses the reads given a Reuse.
type pagingQuery struct {
	fakeQuery
	n      int
	failAt int
	calls  []*fleetviewv1.ListRequest
	lent   map[*byte]int
	reuses int
}

func (q *pagingQuery) List(ctx context.Context, in *fleetviewv1.ListRequest, _ ...grpc.CallOption) (*fleetviewv1.ListResponse, error) {
	q.calls = append(q.calls, in)
	reuse := query.ReuseFrom(ctx)
	var chunk []byte
	keep := func(b []byte) []byte {
		if reuse == nil {
			return b
		}
		if cap(chunk)-len(chunk) < len(b) {
			chunk = reuse.Chunk()
			if q.lent == nil {
				q.lent = map[*byte]int{}
			}
			q.lent[&chunk[:1][0]]++
		}
		chunk = append(chunk, b...)
		return chunk[len(chunk)-len(b) : len(chunk) : len(chunk)]
	}
	if reuse != nil {
		q.reuses++
	}
	if len(q.calls) == q.failAt {
		return nil, status.Error(codes.OutOfRange, "continue: expired")
	}
	from := 0
	if c := in.GetContinue(); c != "" {
		var err error
		if from, err = strconv.Atoi(strings.TrimPrefix(c, "c")); err != nil {
			return nil, status.Error(codes.InvalidArgument, "bad continue")
		}
	}
	to := q.n
	if l := int(in.GetLimit()); l > 0 {
		to = min(from+l, q.n)
	}
	resp := &fleetviewv1.ListResponse{ResourceVersion: fmt.Sprintf("rv%d", len(q.calls))}
	for i := from; i < to; i++ {
		resp.RawItems = append(resp.RawItems, keep(fmt.Appendf(nil, `{"metadata":{"name":"p%06d","namespace":"shop","creationTimestamp":"2026-01-01T00:00:00Z","annotations":{"fleetview.io/cluster":"member1"}}}`, i)))
		resp.RawCells = append(resp.RawCells, keep(fmt.Appendf(nil, `["p%06d","1/1","Running","0","3h","10.0.0.1","node-a"]`, i)))
	}
	if to < q.n {
		resp.Continue = fmt.Sprintf("c%d", to)
		left := int64(q.n - to)
		resp.RemainingItemCount = &left
	}
	return resp, nil
}

// answer is one list answer: a Table's rows or a PodList's items, by
// name, and its metadata.
type answer struct {
	names []string
	meta  metav1.ListMeta
}

func decodeAnswer(t *testing.T, b []byte, table bool) answer {
	t.Helper()
	var a answer
	if table {
		var tb metav1.Table
		if err := json.Unmarshal(b, &tb); err != nil {
			t.Fatalf("not a Table: %v: %.300s", err, b)
		}
		for _, r := range tb.Rows {
			a.names = append(a.names, r.Cells[1].(string))
		}
		a.meta = tb.ListMeta
		return a
	}
	var l struct {
		Kind     string
		Metadata metav1.ListMeta
		Items    []metav1.PartialObjectMetadata
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Kind != "PodList" {
		t.Fatalf("not a PodList (%v): %.300s", err, b)
	}
	for _, it := range l.Items {
		a.names = append(a.names, it.Name)
	}
	a.meta = l.Metadata
	return a
}

// TestListPolicy: under the budget a paged list is answered with every
// object up to the budget, read a page at a time and written as read, with
// the first read's resourceVersion and a continue token right after the
// last object written, so a client following continue reads every object
// once, in order; a small limit, strict paging and protobuf keep pages of
// their own.
func TestListPolicy(t *testing.T) {
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	for _, tc := range []struct {
		name   string
		policy ListPolicy
		n      int
		limit  int
		table  bool
		// answers are the object counts of the answers a client following
		// continue gets; reads the query service calls of the first.
		answers []int
		reads   int
	}{
		{name: "kubectl's pages of 500: one answer", n: 12_000, limit: 500, table: true, answers: []int{12_000}, reads: 3},
		{name: "no limit: one answer", n: 12_000, limit: 0, answers: []int{12_000}, reads: 3},
		{name: "a list within one read", n: 700, limit: 500, table: true, answers: []int{700}, reads: 1},
		{name: "budget of objects: pages of the budget", policy: ListPolicy{BudgetObjects: 7_000}, n: 16_000, limit: 500, table: true, answers: []int{7_000, 7_000, 2_000}, reads: 2},
		{name: "budget of objects in JSON", policy: ListPolicy{BudgetObjects: 7_000}, n: 16_000, limit: 500, answers: []int{7_000, 7_000, 2_000}, reads: 2},
		{name: "budget of bytes: ends after the read that passed it", policy: ListPolicy{BudgetBytes: 1}, n: 12_000, limit: 500, table: true, answers: []int{5_000, 5_000, 2_000}, reads: 1},
		{name: "a limit below the budget's least is strict", n: 1_000, limit: 100, table: true, answers: []int{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, reads: 1},
		{name: "strict", policy: ListPolicy{Strict: true}, n: 1_200, limit: 500, table: true, answers: []int{500, 500, 200}, reads: 1},
		{name: "strict JSON", policy: ListPolicy{Strict: true}, n: 1_200, limit: 500, answers: []int{500, 500, 200}, reads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &pagingQuery{n: tc.n}
			h := New(q, fakeCatalog(), nil, nil, WithListPolicy(tc.policy))
			var got []int
			var names []string
			cont := ""
			for i := 0; i == 0 || cont != ""; i++ {
				if i > len(tc.answers) {
					t.Fatalf("more answers than %v", tc.answers)
				}
				path := fmt.Sprintf("/api/v1/pods?limit=%d&continue=%s", tc.limit, cont)
				r := httptest.NewRequest("GET", path, nil)
				if tc.table {
					r.Header.Set("Accept", accept)
				}
				w := httptest.NewRecorder()
				before := len(q.calls)
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					t.Fatalf("%s: %d %s", path, w.Code, w.Body.Bytes())
				}
				a := decodeAnswer(t, w.Body.Bytes(), tc.table)
				if i == 0 && len(q.calls)-before != tc.reads {
					t.Errorf("first answer read %d times, want %d", len(q.calls)-before, tc.reads)
				}
				// The first read's version: the snapshot the answer is of.
				if want := fmt.Sprintf("rv%d", before+1); a.meta.ResourceVersion != want {
					t.Errorf("answer %d: resourceVersion %q, want %q", i, a.meta.ResourceVersion, want)
				}
				if left := tc.n - len(names) - len(a.names); (a.meta.Continue != "") != (left > 0) ||
					(left > 0 && (a.meta.RemainingItemCount == nil || *a.meta.RemainingItemCount != int64(left))) {
					t.Errorf("answer %d: continue %q remaining %v with %d left", i, a.meta.Continue, a.meta.RemainingItemCount, left)
				}
				got = append(got, len(a.names))
				names = append(names, a.names...)
				cont = a.meta.Continue
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.answers) {
				t.Errorf("answers of %v objects, want %v", got, tc.answers)
			}
			for i, n := range names {
				if want := fmt.Sprintf("p%06d", i); n != want {
					t.Fatalf("object %d is %s, want %s: continue is not exact", i, n, want)
				}
			}
			if len(names) != tc.n {
				t.Fatalf("%d objects, want %d", len(names), tc.n)
			}
			for _, c := range q.calls[1:] {
				if c.GetContinue() != "" && (c.GetResourceVersion() != "" || c.GetResourceVersionMatch() != "") {
					t.Fatalf("a continued read names a version: %v", c)
				}
			}
			// A streamed answer lends every read its written reads'
			// memory (the names above are intact: none was reused before
			// it was written); a strict one lends none.
			if streamed := tc.reads > 1; streamed {
				again := 0
				for _, n := range q.lent {
					again += n - 1
				}
				if q.reuses != len(q.calls) || again == 0 {
					t.Errorf("%d of %d reads given a Reuse, %d chunks lent again: want every read, some", q.reuses, len(q.calls), again)
				}
			} else if tc.policy.Strict && q.reuses != 0 {
				t.Errorf("strict paging gave %d reads a Reuse", q.reuses)
			}
		})
	}
}

// TestListPolicyReads: the reads a budget answer makes: the first with
// the client's selection and version, the rest with the continue token
// alone; protobuf reads one page of at least protoListPage.
func TestListPolicyReads(t *testing.T) {
	q := &pagingQuery{n: 12_000}
	h := New(q, fakeCatalog(), nil, nil)
	r := httptest.NewRequest("GET", "/clusters/member1/api/v1/namespaces/shop/pods?limit=500&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn&resourceVersion=rv0&resourceVersionMatch=NotOlderThan", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || len(q.calls) != 3 {
		t.Fatalf("%d after %d reads", w.Code, len(q.calls))
	}
	first := q.calls[0]
	if first.GetLimit() != listReadPage || first.GetResourceVersion() != "rv0" || first.GetResourceVersionMatch() != "NotOlderThan" || first.GetContinue() != "" {
		t.Fatalf("first read %v", first)
	}
	for _, c := range q.calls[1:] {
		if c.GetLabelSelector() != "app=web" || c.GetFieldSelector() != "spec.nodeName=n" || c.GetNamespace() != "shop" ||
			len(c.GetClusters()) != 1 || c.GetClusters()[0] != "member1" || c.GetContinue() == "" || c.GetResourceVersion() != "" {
			t.Fatalf("continued read %v", c)
		}
	}

	q = &pagingQuery{n: 12_000}
	h = New(q, protoCatalog(), nil, nil)
	r = httptest.NewRequest("GET", "/api/v1/pods?limit=500", nil)
	r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || len(q.calls) != 1 || q.calls[0].GetLimit() != protoListPage {
		t.Fatalf("protobuf: %d after reads %v", w.Code, q.calls)
	}
	// A budget smaller than protobuf's page bounds it too.
	q = &pagingQuery{n: 12_000}
	h = New(q, protoCatalog(), nil, nil, WithListPolicy(ListPolicy{BudgetObjects: 2_000}))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || len(q.calls) != 1 || q.calls[0].GetLimit() != 2_000 {
		t.Fatalf("protobuf with a budget of 2,000: %d after reads %v", w.Code, q.calls)
	}
}

// TestListPolicyFailsMidAnswer: a read after the answer began fails (its
// snapshot expired): the answer cannot be a Status any more, and its body
// is left without its end, so no client takes it for the whole list.
func TestListPolicyFailsMidAnswer(t *testing.T) {
	for _, table := range []bool{true, false} {
		q := &pagingQuery{n: 12_000, failAt: 2}
		h := New(q, fakeCatalog(), nil, nil)
		r := httptest.NewRequest("GET", "/api/v1/pods?limit=500", nil)
		if table {
			r.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var v any
		if err := json.Unmarshal(w.Body.Bytes(), &v); err == nil || w.Body.Len() == 0 {
			t.Fatalf("table %v: an answer cut short decodes (%d bytes)", table, w.Body.Len())
		}
	}
}

func TestListPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p   ListPolicy
		bad bool
	}{
		{ListPolicy{}, false},
		{ListPolicy{Strict: true, BudgetObjects: 10, BudgetBytes: 10}, false},
		{ListPolicy{BudgetObjects: -1}, true},
		{ListPolicy{BudgetBytes: -1}, true},
	} {
		err := tc.p.Validate()
		if (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrInvalidListPolicy)) {
			t.Errorf("%+v: %v", tc.p, err)
		}
	}
}

// TestListReuseAcrossAnswers: a finished streamed answer's memory serves
// the next answer's reads (the handler keeps its Reuse), and both answers
// are whole and exact. The collector is off and one P runs, so the pool
// the Reuse waits in keeps it (a collection may drop it: memory, not
// correctness).
func TestListReuseAcrossAnswers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	q := &pagingQuery{n: 12_000}
	h := New(q, fakeCatalog(), nil, nil)
	var chunks []int
	for i := range 2 {
		r := httptest.NewRequest("GET", "/api/v1/pods?limit=500", nil)
		r.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		a := decodeAnswer(t, w.Body.Bytes(), true)
		if len(a.names) != q.n {
			t.Fatalf("answer %d: %d rows, want %d", i, len(a.names), q.n)
		}
		for j, n := range a.names {
			if want := fmt.Sprintf("p%06d", j); n != want {
				t.Fatalf("answer %d: row %d is %s, want %s", i, j, n, want)
			}
		}
		chunks = append(chunks, len(q.lent))
	}
	if chunks[0] == 0 || chunks[1] != chunks[0] {
		t.Fatalf("distinct chunks after each answer %v: the second answer made new ones", chunks)
	}
}
