package queryapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// storedReader answers from fixed stored objects, as a store written
// before the materializer checked the whole grammar could.
type storedReader struct{ items []query.Object }

func (r *storedReader) Get(context.Context, query.GetOptions) (query.Object, error) {
	return r.items[0], nil
}

func (r *storedReader) List(context.Context, query.ListOptions) (query.Page, error) {
	return query.Page{Items: append([]query.Object(nil), r.items...)}, nil
}

func (r *storedReader) Search(context.Context, query.SearchOptions) (query.Page, error) {
	return query.Page{Items: append([]query.Object(nil), r.items...)}, nil
}

func (r *storedReader) Versions(context.Context) (query.Version, error) { return query.Version{}, nil }

func pod(cluster, name string) []byte {
	return []byte(`{"kind":"Pod","metadata":{"name":"` + name + `","namespace":"shop","annotations":{"fleetview.io/cluster":"` + cluster + `"}},"spec":{"containers":[{"name":"c","image":"x"}]}}`)
}

// hostile are stored objects one member cluster's collector could have
// had applied before the whole grammar was checked.
var hostile = []struct{ name, obj string }{
	{"the forged Pod's spec", `{"metadata":{"name":"bad"},"spec":{"a" 1 2}}`},
	{"closed early: an item of its own making", `{"metadata":{"name":"bad"}},{"kind":"Injected"}`},
	{"trailing comma", `{"metadata":{"name":"bad"},"spec":{"a":[1,]}}`},
	{"leading zero", `{"metadata":{"name":"bad"},"spec":{"a":[01]}}`},
	{"bad literal", `{"metadata":{"name":"bad"},"spec":{"a":nul}}`},
	{"bad escape", `{"metadata":{"name":"bad"},"spec":{"a":"\q"}}`},
	{"control byte", "{\"metadata\":{\"name\":\"bad\"},\"spec\":{\"a\":\"\x00\"}}"},
	{"invalid UTF-8", "{\"metadata\":{\"name\":\"bad\"},\"spec\":{\"a\":\"\xff\"}}"},
	{"too deep", `{"spec":` + strings.Repeat("[", rawjson.MaxDepth) + strings.Repeat("]", rawjson.MaxDepth) + `}`},
	{"not an object", `[1]`},
	{"empty", ``},
}

// TestMalformedStoredObjectLeftOut: a list, a search and a watch's initial
// list leave out a stored object that is not valid JSON and keep every
// other cluster's; each one left out is counted under its cluster; a Get of
// it alone is a clear 500, never its bytes.
func TestMalformedStoredObjectLeftOut(t *testing.T) {
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			r := &storedReader{items: []query.Object{
				{Cluster: "member1", JSON: []byte(tc.obj)},
				{Cluster: "member2", JSON: pod("member2", "a")},
				{Cluster: "member3", JSON: pod("member3", "b")},
			}}
			q := &queryService{reader: r, searcher: r, metrics: m, sealer: query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), versions: newVersionBook(nil, query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), 0, 0)}
			ctx := context.Background()
			lr, err := q.list(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(lr.GetRawItems(), []byte(",")); !json.Valid(append(append([]byte("["), got...), ']')) || len(lr.GetRawItems()) != 2 {
				t.Fatalf("list items %q", lr.GetRawItems())
			}
			sr, err := q.search(ctx, &fleetviewv1.SearchRequest{Text: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if len(sr.GetItems()) != 2 || sr.GetItems()[0].GetCluster() != "member2" {
				t.Fatalf("search hits %v", sr.GetItems())
			}
			n := 0
			if _, err := q.listAll(ctx, query.ListOptions{}, func(o query.Object) error {
				if o.Cluster == "member1" {
					t.Fatalf("watch's initial list sent member1's %q", o.JSON)
				}
				n++
				return nil
			}); err != nil || n != 2 {
				t.Fatalf("watch initial list: %d objects, %v", n, err)
			}
			_, err = q.Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "shop", Name: "bad"})
			if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), query.ErrCorrupt.Error()) || !strings.Contains(st.Message(), "member1") {
				t.Fatalf("Get of the bad object: %v", err)
			}
			if got := testutil.ToFloat64(m.malformed.WithLabelValues("member1")); got != 4 {
				t.Fatalf("skipped for member1: %v, want 4 (list, search, watch, get)", got)
			}
			if got := testutil.ToFloat64(m.malformed.WithLabelValues("member2")); got != 0 {
				t.Fatalf("skipped for member2: %v", got)
			}
		})
	}
}

// TestMalformedNoneBadKeepsPage: with nothing bad the page is the
// backend's, in order and uncopied.
func TestMalformedNoneBadKeepsPage(t *testing.T) {
	q := &queryService{}
	items := []query.Object{{Cluster: "a", JSON: pod("a", "x")}, {Cluster: "b", JSON: pod("b", "y")}}
	got := q.dropMalformed(context.Background(), "list", items)
	if len(got) != 2 || &got[0] != &items[0] {
		t.Fatalf("page changed: %v", got)
	}
	if err := q.checkObject(context.Background(), query.Object{Cluster: "a", JSON: []byte(`{`)}); !errors.Is(err, query.ErrCorrupt) {
		t.Fatalf("checkObject = %v", err)
	}
}

// BenchmarkDropMalformed is what the read side's check adds to a page of
// 500 realistic Pods, none bad.
func BenchmarkDropMalformed(b *testing.B) {
	items := make([]query.Object, 500)
	var n int64
	for i := range items {
		items[i] = query.Object{Cluster: "c", JSON: benchdata.Pod("c", i, 3)}
		n += int64(len(items[i].JSON))
	}
	q := &queryService{}
	b.SetBytes(n)
	for b.Loop() {
		if got := q.dropMalformed(context.Background(), "list", items); len(got) != len(items) {
			b.Fatal(len(got))
		}
	}
}
