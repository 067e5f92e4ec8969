package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeQuery answers from fixed data and records the requests.
type fakeQuery struct {
	items [][]byte
	// cells pair with items (RawCells), when set.
	cells   [][]byte
	listErr error
	getErr  error
	events  []*fleetviewv1.WatchEvent
	// watchEnd ends the event stream (default io.EOF); block makes it
	// block until the call's context ends instead.
	watchEnd error
	block    bool
	lastL    *fleetviewv1.ListRequest
	lastG    *fleetviewv1.GetRequest
	lastW    *fleetviewv1.WatchRequest
}

func (f *fakeQuery) Get(_ context.Context, in *fleetviewv1.GetRequest, _ ...grpc.CallOption) (*fleetviewv1.GetResponse, error) {
	f.lastG = in
	if f.getErr != nil {
		return nil, f.getErr
	}
	if in.GetStructured() {
		return nil, status.Error(codes.Internal, "kubeapi must ask for the stored bytes")
	}
	resp := &fleetviewv1.GetResponse{RawObject: f.items[0], Cluster: "member1"}
	if len(f.cells) > 0 {
		resp.RawCells = f.cells[0]
	}
	return resp, nil
}

func (f *fakeQuery) List(_ context.Context, in *fleetviewv1.ListRequest, _ ...grpc.CallOption) (*fleetviewv1.ListResponse, error) {
	f.lastL = in
	if f.listErr != nil {
		return nil, f.listErr
	}
	if in.GetContinue() != "" {
		// The page after the first (a budget answer reads on): the end.
		return &fleetviewv1.ListResponse{ResourceVersion: "rv1"}, nil
	}
	n := int64(7)
	return &fleetviewv1.ListResponse{RawItems: f.items, RawCells: f.cells, ResourceVersion: "rv1", Continue: "c1", RemainingItemCount: &n}, nil
}

type fakeStream struct {
	grpc.ClientStream
	ctx    context.Context
	events []*fleetviewv1.WatchEvent
	end    error
	block  bool
}

func (s *fakeStream) Recv() (*fleetviewv1.WatchEvent, error) {
	if len(s.events) == 0 {
		if s.block {
			<-s.ctx.Done()
			return nil, status.FromContextError(s.ctx.Err()).Err()
		}
		return nil, s.end
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, nil
}

func (f *fakeQuery) Watch(ctx context.Context, in *fleetviewv1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[fleetviewv1.WatchEvent], error) {
	f.lastW = in
	end := f.watchEnd
	if end == nil {
		end = io.EOF
	}
	return &fakeStream{ctx: ctx, events: f.events, end: end, block: f.block}, nil
}

// catalogOf is a loaded catalog of the records, with a registry that
// selects every kind they report.
func catalogOf(recs ...*inventory.Cluster) *catalog.Catalog {
	reg := &registry.ResourceRegistry{}
	reg.Name = "all"
	seen := map[schema.GroupVersionKind]bool{}
	for _, r := range recs {
		for _, res := range r.Resources {
			gvk := schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}
			if res.Kind == "" || seen[gvk] {
				continue
			}
			seen[gvk] = true
			reg.Spec.ResourceSelectors = append(reg.Spec.ResourceSelectors, registry.ResourceSelector{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind})
		}
	}
	return catalog.Fixed(recs, []*registry.ResourceRegistry{reg})
}

func res(g, v, r, k string, ns bool) inventory.ResourceState {
	return inventory.ResourceState{Group: g, Version: v, Resource: r, Kind: k, Namespaced: ns}
}

// fakeCatalog is two clusters' inventory.
func fakeCatalog() *catalog.Catalog {
	return catalogOf(
		&inventory.Cluster{Name: "member1", KubernetesVersion: "v1.37.2", Resources: []inventory.ResourceState{withColumns(res("", "v1", "pods", "Pod", true), podColumns), res("", "v1", "nodes", "Node", false)}},
		&inventory.Cluster{Name: "member2", KubernetesVersion: "v1.36.1", Resources: []inventory.ResourceState{withColumns(res("", "v1", "pods", "Pod", true), podColumns), res("apps", "v1", "deployments", "Deployment", true),
			{Kind: "Widget", Message: "not served"}}},
	)
}

// podColumns are a member's Pod columns (kube-apiserver's printer).
var podColumns = []inventory.Column{{Name: "Name", Type: "string", Format: "name"}, {Name: "Ready", Type: "string"}, {Name: "Status", Type: "string"},
	{Name: "Restarts", Type: "string"}, {Name: "Age", Type: "string"}, {Name: "IP", Type: "string", Priority: 1}, {Name: "Node", Type: "string", Priority: 1}}

func withColumns(r inventory.ResourceState, cols []inventory.Column) inventory.ResourceState {
	r.Columns = cols
	return r
}

const podJSON = `{"metadata":{"name":"web","namespace":"shop","labels":{"app":"web"},"annotations":{"fleetview.io/cluster":"member1","resource.karmada.io/cached-from-cluster":"member1"},"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"nodeName":"node-a","containers":[{"name":"c","image":"x"}]},"status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[{"name":"c","ready":true,"restartCount":2,"image":"x","imageID":""}]}}`

func serve(t *testing.T, q *fakeQuery, method, path, accept string) (*http.Response, []byte) {
	t.Helper()
	h := New(q, fakeCatalog(), nil, nil)
	r := httptest.NewRequest(method, path, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	resp := w.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestStatusResponses(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		q                  *fakeQuery
		code               int
		reason             metav1.StatusReason
		mentions           string
	}{
		{"unknown resource", "GET", "/api/v1/widgets", &fakeQuery{}, 404, metav1.StatusReasonNotFound, "widgets"},
		{"unknown group", "GET", "/apis/example.io/v1", &fakeQuery{}, 404, metav1.StatusReasonNotFound, "example.io"},
		{"subresource", "GET", "/api/v1/namespaces/shop/pods/web/log", &fakeQuery{}, 404, metav1.StatusReasonNotFound, "log"},
		{"cluster-scoped in a namespace", "GET", "/api/v1/namespaces/shop/nodes", &fakeQuery{}, 404, metav1.StatusReasonNotFound, "cluster-scoped"},
		{"unknown cluster", "GET", "/clusters/nosuch/api/v1/pods", &fakeQuery{}, 404, metav1.StatusReasonNotFound, "nosuch"},
		{"not found", "GET", "/api/v1/namespaces/shop/pods/web", &fakeQuery{getErr: status.Error(codes.NotFound, "no")}, 404, metav1.StatusReasonNotFound, `pods "web" not found`},
		{"ambiguous", "GET", "/api/v1/namespaces/shop/pods/web", &fakeQuery{getErr: status.Error(codes.Aborted, "in member1, member2")}, 409, metav1.StatusReasonConflict, "member2"},
		{"expired", "GET", "/api/v1/pods?limit=1&continue=x", &fakeQuery{listErr: status.Error(codes.OutOfRange, "continue: expired")}, 410, metav1.StatusReasonExpired, "continue"},
		{"bad selector", "GET", "/api/v1/pods?labelSelector=a", &fakeQuery{listErr: status.Error(codes.InvalidArgument, "labelSelector: bad")}, 400, metav1.StatusReasonBadRequest, "labelSelector"},
		{"forbidden", "GET", "/api/v1/pods", &fakeQuery{listErr: status.Error(codes.PermissionDenied, "no")}, 403, metav1.StatusReasonForbidden, "no"},
		{"unauthorized", "GET", "/api/v1/pods", &fakeQuery{listErr: status.Error(codes.Unauthenticated, "who")}, 401, metav1.StatusReasonUnauthorized, "who"},
		{"bad limit", "GET", "/api/v1/pods?limit=-1", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "limit"},
		{"bad watch", "GET", "/api/v1/pods?watch=maybe", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "watch"},
		{"bad timeout", "GET", "/api/v1/pods?watch=1&timeoutSeconds=x", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "timeoutSeconds"},
		{"initial events without match", "GET", "/api/v1/pods?watch=1&sendInitialEvents=true", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "resourceVersionMatch"},
		{"exact without resourceVersion", "GET", "/api/v1/pods?resourceVersionMatch=Exact", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "resourceVersionMatch is forbidden unless resourceVersion is provided"},
		{"exact with resourceVersion 0", "GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=0", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`},
		{"exact with continue", "GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=rv1&continue=c1", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "resourceVersionMatch is forbidden when continue is provided"},
		{"exact watch", "GET", "/api/v1/pods?watch=1&resourceVersionMatch=Exact&resourceVersion=rv1", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "only NotOlderThan"},
		{"unknown match", "GET", "/api/v1/pods?resourceVersionMatch=Newest&resourceVersion=rv1", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "must be Exact or NotOlderThan"},
		{"exact moved past", "GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=rv1", &fakeQuery{listErr: status.Error(codes.OutOfRange, "resourceVersion \"rv1\" ... keeps no history")}, 410, metav1.StatusReasonExpired, "keeps no history"},
		{"asOf not a time", "GET", "/api/v1/pods?asOf=noon", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, `asOf: "noon" is not an RFC 3339 time`},
		{"asOf in the future", "GET", "/api/v1/namespaces/shop/pods/web?asOf=2999-01-01T00:00:00Z", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, "asOf: 2999-01-01T00:00:00Z is in the future"},
		{"asOf on a watch", "GET", "/api/v1/pods?watch=1&asOf=2026-01-01T00:00:00Z", &fakeQuery{}, 400, metav1.StatusReasonBadRequest, `invalid asOf "2026-01-01T00:00:00Z"`},
		{"asOf before the window", "GET", "/api/v1/pods?asOf=2026-01-01T00:00:00Z", &fakeQuery{listErr: apierr.ToStatus(query.ErrOutsideWindow)}, 410, metav1.StatusReason("Gone"), "retention window"},
		{"delete", "DELETE", "/api/v1/namespaces/shop/pods/web", &fakeQuery{}, 405, metav1.StatusReasonMethodNotAllowed, "read-only"},
		{"create", "POST", "/clusters/member1/apis/apps/v1/namespaces/shop/deployments", &fakeQuery{}, 405, metav1.StatusReasonMethodNotAllowed, "read-only"},
		{"patch", "PATCH", "/api/v1/namespaces/shop/pods/web", &fakeQuery{}, 405, metav1.StatusReasonMethodNotAllowed, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := serve(t, tc.q, tc.method, tc.path, "")
			var st metav1.Status
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if resp.StatusCode != tc.code || int(st.Code) != tc.code || st.Reason != tc.reason || st.Kind != "Status" || !strings.Contains(st.Message, tc.mentions) {
				t.Fatalf("got %d %s, want %d %s mentioning %q", resp.StatusCode, b, tc.code, tc.reason, tc.mentions)
			}
		})
	}
}

// TestAsOfPassedOn: asOf on a Kubernetes get or list reaches the query
// service as the time it was parsed into (any offset becomes UTC, the
// nanoseconds kept), beside the selectors and the per-cluster view.
func TestAsOfPassedOn(t *testing.T) {
	const in, want = "2026-12-06T19:30:00.123456789%2B01:00", "2026-12-06T18:30:00.123456789Z"
	q := &fakeQuery{items: [][]byte{[]byte(`{"metadata":{"name":"web","namespace":"shop"}}`)}}
	if resp, b := serve(t, q, "GET", "/clusters/member1/api/v1/namespaces/shop/pods?labelSelector=tier%3Dgold&asOf="+in, ""); resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	if l := q.lastL; l.GetAsOf() != want || l.GetLabelSelector() != "tier=gold" || !slices.Equal(l.GetClusters(), []string{"member1"}) {
		t.Errorf("list request %v, want asOf %s", l, want)
	}
	if resp, b := serve(t, q, "GET", "/api/v1/namespaces/shop/pods/web?asOf="+in, "application/json;as=Table;v=v1;g=meta.k8s.io"); resp.StatusCode != 200 || !strings.Contains(string(b), `"kind":"Table"`) {
		t.Fatalf("get as a Table: %d %s", resp.StatusCode, b)
	}
	if g := q.lastG; g.GetAsOf() != want || g.GetName() != "web" {
		t.Errorf("get request %v, want asOf %s", g, want)
	}
	if _, _ = serve(t, q, "GET", "/api/v1/namespaces/shop/pods/web", ""); q.lastG.GetAsOf() != "" {
		t.Errorf("get without asOf asked %q", q.lastG.GetAsOf())
	}
}

func TestDiscovery(t *testing.T) {
	t.Run("legacy core", func(t *testing.T) {
		_, b := serve(t, &fakeQuery{}, "GET", "/api/v1", "")
		var l metav1.APIResourceList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range l.APIResources {
			got = append(got, r.Name+":"+r.Kind+":"+strings.Join(r.ShortNames, ",")+":"+map[bool]string{true: "ns", false: "cluster"}[r.Namespaced]+":"+strings.Join(r.Verbs, ","))
		}
		if want := []string{"nodes:Node:no:cluster:get,list,watch", "pods:Pod:po:ns:get,list,watch"}; !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("per-cluster groups", func(t *testing.T) {
		_, b := serve(t, &fakeQuery{}, "GET", "/clusters/member1/apis", "")
		var l metav1.APIGroupList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Groups) != 0 {
			t.Fatalf("member1 caches no grouped resource, got %v", l.Groups)
		}
		_, b = serve(t, &fakeQuery{}, "GET", "/apis", "")
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Groups) != 1 || l.Groups[0].Name != "apps" || l.Groups[0].PreferredVersion.GroupVersion != "apps/v1" {
			t.Fatalf("fleet groups %+v", l.Groups)
		}
	})
	t.Run("aggregated", func(t *testing.T) {
		accept := "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
		resp, b := serve(t, &fakeQuery{}, "GET", "/apis", accept)
		if ct := resp.Header.Get("Content-Type"); ct != aggregatedContentType {
			t.Fatalf("content type %q", ct)
		}
		var l apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].Name != "apps" || l.Items[0].Versions[0].Resources[0].ResponseKind.Kind != "Deployment" ||
			l.Items[0].Versions[0].Resources[0].Scope != apidiscoveryv2.ScopeNamespace {
			t.Fatalf("%s", b)
		}
	})
	t.Run("version is the oldest member's", func(t *testing.T) {
		_, b := serve(t, &fakeQuery{}, "GET", "/version", "")
		var v struct{ Major, Minor, GitVersion string }
		if err := json.Unmarshal(b, &v); err != nil || v.Major != "1" || v.Minor != "36" || v.GitVersion != "v1.36.1" {
			t.Fatalf("%v %s", err, b)
		}
	})
}

func TestList(t *testing.T) {
	withKind := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"api","annotations":{"fleetview.io/cluster":"member2"}}}`
	q := &fakeQuery{items: [][]byte{[]byte(podJSON), []byte(withKind)}}
	resp, b := serve(t, q, "GET", "/clusters/member2/api/v1/namespaces/shop/pods?labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn&limit=2&resourceVersion=0", "")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if l := q.lastL; l.GetGroup() != "core" || l.GetNamespace() != "shop" || l.GetLabelSelector() != "app=web" || l.GetFieldSelector() != "spec.nodeName=n" ||
		l.GetLimit() != 2 || l.GetStructured() || !slices.Equal(l.GetClusters(), []string{"member2"}) || l.GetResourceVersion() != "0" {
		t.Fatalf("request %v", l)
	}
	var list struct {
		Kind, APIVersion string
		Metadata         struct {
			ResourceVersion, Continue string
			RemainingItemCount        *int64
		}
		Items []map[string]any
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || list.Metadata.ResourceVersion != "rv1" || list.Metadata.Continue != "c1" ||
		list.Metadata.RemainingItemCount == nil || *list.Metadata.RemainingItemCount != 7 || len(list.Items) != 2 {
		t.Fatalf("%s", b)
	}
	for _, it := range list.Items {
		if it["kind"] != "Pod" || it["apiVersion"] != "v1" {
			t.Fatalf("item %v", it)
		}
	}
	if !strings.Contains(string(b), `"remainingItemCount":7`) {
		t.Fatalf("remainingItemCount is not a number: %s", b)
	}
	for _, m := range []string{"Exact", "NotOlderThan", ""} {
		resp, b = serve(t, q, "GET", "/api/v1/pods?resourceVersion=rv0&limit=1&resourceVersionMatch="+m, "")
		if resp.StatusCode != 200 || q.lastL.GetResourceVersionMatch() != m || q.lastL.GetResourceVersion() != "rv0" {
			t.Fatalf("resourceVersionMatch=%s: %d %s, request %v", m, resp.StatusCode, b, q.lastL)
		}
	}
}

func TestTable(t *testing.T) {
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	podCols := []string{"Cluster", "Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"}
	// The member printed the Pod's Age when it listed it; the answer's
	// is computed for now (index 5 below is checked apart).
	cells := []byte(`["web","1/1","Running","2 (5m ago)","3h","10.0.0.1","node-a"]`)
	// Valid JSON a Table once could not decode: nothing decodes them now,
	// so they are rows like any other.
	odd := []string{
		`{"metadata":{"name":"web","namespace":"shop","annotations":{"fleetview.io/cluster":"member1"}},"spec":{"containers":"x"}}`,
		`{"metadata":{"name":"web","namespace":"shop","annotations":{"fleetview.io/cluster":"member1"},"labels":{"a":1}}}`,
	}
	for _, tc := range []struct {
		name, path string
		item       string
		cells      []byte
		columns    []string
		row        []any // nil: not checked
		age        string
		object     string // "metadata" (PartialObjectMetadata), "object", "none"
	}{
		{name: "pods", path: "/api/v1/pods", item: podJSON, cells: cells, columns: podCols,
			row: []any{"member1", "web", "1/1", "Running", "2 (5m ago)", "", "10.0.0.1", "node-a"}, object: "metadata"},
		{name: "get one", path: "/api/v1/namespaces/shop/pods/web", item: podJSON, cells: cells, columns: podCols,
			row: []any{"member1", "web", "1/1", "Running", "2 (5m ago)", "", "10.0.0.1", "node-a"}, object: "metadata"},
		{name: "per cluster", path: "/clusters/member1/api/v1/pods", item: podJSON, cells: cells, columns: podCols,
			row: []any{"member1", "web", "1/1", "Running", "2 (5m ago)", "", "10.0.0.1", "node-a"}, object: "metadata"},
		{name: "whole objects", path: "/api/v1/pods?includeObject=Object", item: podJSON, cells: cells, columns: podCols, object: "object"},
		{name: "no objects", path: "/api/v1/pods?includeObject=None", item: podJSON, cells: cells, columns: podCols, object: "none"},
		// Stored without cells, or with cells that do not match the
		// columns: Name and Age, the rest unknown.
		{name: "no cells", path: "/api/v1/pods", item: podJSON, columns: podCols,
			row: []any{"member1", "web", "<unknown>", "<unknown>", "<unknown>", "", "<unknown>", "<unknown>"}, object: "metadata"},
		{name: "cells of other columns", path: "/api/v1/pods", item: podJSON, cells: []byte(`["web","1/1"]`), columns: podCols,
			row: []any{"member1", "web", "<unknown>", "<unknown>", "<unknown>", "", "<unknown>", "<unknown>"}, object: "metadata"},
		{name: "cells not JSON", path: "/api/v1/pods", item: podJSON, cells: []byte(`["web",`), columns: podCols,
			row: []any{"member1", "web", "<unknown>", "<unknown>", "<unknown>", "", "<unknown>", "<unknown>"}, object: "metadata"},
		// No cluster reported columns for nodes.
		{name: "generic", path: "/api/v1/nodes", item: podJSON, columns: []string{"Cluster", "Name", "Age"}, row: []any{"member1", "web", ""}, object: "metadata"},
		{name: "spec not decoded", path: "/api/v1/pods", item: odd[0], columns: podCols, object: "metadata"},
		{name: "labels not decoded", path: "/api/v1/pods", item: odd[1], columns: podCols, object: "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQuery{items: [][]byte{[]byte(tc.item)}}
			if tc.cells != nil {
				q.cells = [][]byte{tc.cells}
			}
			resp, b := serve(t, q, "GET", tc.path, accept)
			var tbl metav1.Table
			if err := json.Unmarshal(b, &tbl); err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %v: %s", resp.StatusCode, err, b)
			}
			var cols []string
			for _, c := range tbl.ColumnDefinitions {
				cols = append(cols, c.Name)
			}
			if tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" || !slices.Equal(cols, tc.columns) || len(tbl.Rows) != 1 {
				t.Fatalf("%s", b)
			}
			got := tbl.Rows[0].Cells
			if len(got) != len(tc.columns) {
				t.Fatalf("row %v for columns %v", got, tc.columns)
			}
			ageAt := slices.Index(tc.columns, "Age")
			created, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
			wantAge := duration.HumanDuration(time.Since(created))
			if a, _ := got[ageAt].(string); tc.item == podJSON && a != wantAge {
				t.Fatalf("age %v, want %s (computed for now, not the member's)", got[ageAt], wantAge)
			}
			if tc.row != nil {
				got[ageAt] = ""
				want := slices.Clone(tc.row)
				want[ageAt] = ""
				if b1, _ := json.Marshal(got); string(b1) != mustJSON(want) {
					t.Fatalf("row %s, want %s", b1, mustJSON(want))
				}
			}
			raw := tbl.Rows[0].Object.Raw
			switch tc.object {
			case "metadata":
				var pom metav1.PartialObjectMetadata
				if err := json.Unmarshal(raw, &pom); tc.item == podJSON && (err != nil || pom.Kind != "PartialObjectMetadata" || pom.Labels["app"] != "web" || pom.Name != "web") {
					t.Fatalf("row object %v %s", err, raw)
				}
				if !bytes.Contains(raw, []byte(`"kind":"PartialObjectMetadata"`)) || bytes.Contains(raw, []byte(`"spec"`)) {
					t.Fatalf("row object %s, want the metadata alone", raw)
				}
			case "object":
				if !bytes.Contains(raw, []byte(`"podIP":"10.0.0.1"`)) || !bytes.Contains(raw, []byte(`"kind":"Pod"`)) {
					t.Fatalf("row object %s, want the whole Pod", raw)
				}
			case "none":
				if len(raw) != 0 && string(raw) != "null" {
					t.Fatalf("row object %s, want none", raw)
				}
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestWatchTable: a watch as kubectl get -w asks for it: each event a
// Table of one row, the member's cells after CLUSTER, the row's object
// carrying the event's resourceVersion; bookmarks are not sent.
func TestWatchTable(t *testing.T) {
	q := &fakeQuery{events: []*fleetviewv1.WatchEvent{
		{Type: "ADDED", RawObject: []byte(podJSON), RawCells: []byte(`["web","1/1","Running","0","3h","10.0.0.1","node-a"]`), Cluster: "member1", ResourceVersion: "tok1"},
		{Type: "BOOKMARK", RawObject: []byte(`{"apiVersion":"v1","metadata":{"resourceVersion":"tok2"}}`), ResourceVersion: "tok2"},
		{Type: "MODIFIED", RawObject: []byte(podJSON), Cluster: "member1", ResourceVersion: "tok3"},
	}}
	resp, b := serve(t, q, "GET", "/api/v1/pods?watch=true", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (no bookmark): %s", len(lines), b)
	}
	want := [][]any{{"member1", "web", "1/1", "Running", "0", "", "10.0.0.1", "node-a"},
		{"member1", "web", "<unknown>", "<unknown>", "<unknown>", "", "<unknown>", "<unknown>"}}
	for i, l := range lines {
		var ev struct {
			Type   string
			Object metav1.Table
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		if ev.Object.Kind != "Table" || len(ev.Object.Rows) != 1 || len(ev.Object.ColumnDefinitions) != 8 {
			t.Fatalf("line %d: %s", i, l)
		}
		cells := ev.Object.Rows[0].Cells
		cells[5] = ""
		if got := mustJSON(cells); got != mustJSON(want[i]) {
			t.Fatalf("line %d cells %s, want %s", i, got, mustJSON(want[i]))
		}
		var pom metav1.PartialObjectMetadata
		if err := json.Unmarshal(ev.Object.Rows[0].Object.Raw, &pom); err != nil || pom.ResourceVersion != []string{"tok1", "tok3"}[i] {
			t.Fatalf("line %d object %s: %v", i, ev.Object.Rows[0].Object.Raw, err)
		}
	}
}

func TestWatch(t *testing.T) {
	q := &fakeQuery{events: []*fleetviewv1.WatchEvent{
		{Type: "ADDED", RawObject: []byte(`{"metadata":{"name":"web","resourceVersion":"member-rv"}}`), Cluster: "member1", ResourceVersion: "tok1"},
		{Type: "BOOKMARK", RawObject: []byte(`{"apiVersion":"v1","metadata":{"resourceVersion":"tok2","annotations":{"k8s.io/initial-events-end":"true"}}}`), ResourceVersion: "tok2", InitialEventsEnd: true},
	}}
	resp, b := serve(t, q, "GET", "/clusters/member1/api/v1/namespaces/shop/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5", "")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if w := q.lastW; !w.GetSendInitialEvents() || !w.GetAllowBookmarks() || w.GetNamespace() != "shop" || !slices.Equal(w.GetClusters(), []string{"member1"}) {
		t.Fatalf("request %v", w)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%s", b)
	}
	var evs [2]struct {
		Type   string
		Object struct {
			Kind, APIVersion string
			Metadata         metav1.ObjectMeta
		}
	}
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if e := evs[0]; e.Type != "ADDED" || e.Object.Kind != "Pod" || e.Object.APIVersion != "v1" || e.Object.Metadata.ResourceVersion != "tok1" {
		t.Fatalf("first event %+v", e)
	}
	if e := evs[1]; e.Type != "BOOKMARK" || e.Object.Metadata.ResourceVersion != "tok2" || e.Object.Metadata.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Fatalf("bookmark %+v", e)
	}
	// A watch on one name is a metadata.name field selector.
	_, _ = serve(t, q, "GET", "/api/v1/namespaces/shop/pods/web?watch=1&fieldSelector=status.phase%3DRunning", "")
	if got := q.lastW.GetFieldSelector(); got != "metadata.name=web,status.phase=Running" {
		t.Fatalf("field selector %q", got)
	}
}

func TestGetWritesStoredBytes(t *testing.T) {
	q := &fakeQuery{items: [][]byte{[]byte(podJSON)}}
	resp, b := serve(t, q, "GET", "/clusters/member1/api/v1/namespaces/shop/pods/web", "application/json")
	if resp.StatusCode != 200 || q.lastG.GetCluster() != "member1" || q.lastG.GetNamespace() != "shop" || q.lastG.GetName() != "web" {
		t.Fatalf("%d %s, request %v", resp.StatusCode, b, q.lastG)
	}
	if want := `{"kind":"Pod","apiVersion":"v1",` + podJSON[1:]; string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
}

// The catalog is filtered by the caller's visibility, judged once per
// request; a caller the judgment refuses gets its status, and nothing
// else is called.
func TestCatalogVisibility(t *testing.T) {
	q := &fakeQuery{items: [][]byte{[]byte(podJSON)}}
	judged := map[string]int{}
	vis := func(r *http.Request) (catalog.Visible, error) {
		tok := r.Header.Get("Authorization")
		judged[tok]++
		switch tok {
		case "Bearer bad":
			return nil, status.Error(codes.Unauthenticated, "unknown token")
		case "Bearer member2":
			return func(cluster string, _ schema.GroupResource) bool { return cluster == "member2" }, nil
		}
		return nil, nil
	}
	h := New(q, fakeCatalog(), vis, nil)
	for _, tc := range []struct {
		token, path string
		code        int
	}{
		{"a", "/api/v1/pods", 200},
		{"a", "/api/v1/nodes", 200},
		{"bad", "/api/v1/pods", 401},
		{"member2", "/api/v1/pods", 200},
		{"member2", "/api/v1/nodes", 404}, // only member1 serves nodes
		{"member2", "/clusters/member1/api/v1/pods", 404},
		{"member2", "/clusters/member2/apis/apps/v1/deployments", 200},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.Header.Set("Authorization", "Bearer "+tc.token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("token %q %s: %d %s, want %d", tc.token, tc.path, w.Code, w.Body, tc.code)
		}
	}
	if want := map[string]int{"Bearer a": 2, "Bearer bad": 1, "Bearer member2": 4}; !maps.Equal(judged, want) {
		t.Fatalf("judged %v, want %v", judged, want)
	}
}

func TestWatchErrorsAndIdle(t *testing.T) {
	obj := []byte(`{"metadata":{"name":"web"}}`)
	expired := status.Error(codes.OutOfRange, "resourceVersion too old")
	t.Run("an error first is an HTTP status", func(t *testing.T) {
		resp, b := serve(t, &fakeQuery{watchEnd: expired}, "GET", "/api/v1/pods?watch=1&resourceVersion=x", "")
		if resp.StatusCode != 410 || !strings.Contains(string(b), `"reason":"Expired"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("a later error is an ERROR event", func(t *testing.T) {
		q := &fakeQuery{events: []*fleetviewv1.WatchEvent{{Type: "ADDED", RawObject: obj, ResourceVersion: "t"}}, watchEnd: expired}
		resp, b := serve(t, q, "GET", "/api/v1/pods?watch=1", "")
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if resp.StatusCode != 200 || len(lines) != 2 || !strings.HasPrefix(lines[1], `{"type":"ERROR","object":{"kind":"Status"`) || !strings.Contains(lines[1], `"code":410`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("a server shutting down ends the stream without an ERROR event", func(t *testing.T) {
		// Reflectors then watch again from their last resourceVersion
		// instead of listing everything.
		shutdown := status.Error(codes.Unavailable, "server shutting down")
		q := &fakeQuery{events: []*fleetviewv1.WatchEvent{{Type: "ADDED", RawObject: obj, ResourceVersion: "t"}}, watchEnd: shutdown}
		resp, b := serve(t, q, "GET", "/api/v1/pods?watch=1", "")
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if resp.StatusCode != 200 || len(lines) != 1 || !strings.HasPrefix(lines[0], `{"type":"ADDED"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		// Before anything was sent it is a real 503.
		resp, b = serve(t, &fakeQuery{watchEnd: shutdown}, "GET", "/api/v1/pods?watch=1", "")
		if resp.StatusCode != 503 || !strings.Contains(string(b), `"kind":"Status"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("an idle watch answers its headers and ends at timeoutSeconds", func(t *testing.T) {
		srv := httptest.NewServer(New(&fakeQuery{block: true}, fakeCatalog(), nil, nil))
		defer srv.Close()
		c := &http.Client{Timeout: 10 * time.Second}
		start := time.Now()
		resp, err := c.Get(srv.URL + "/api/v1/pods?watch=1&timeoutSeconds=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || time.Since(start) > 5*time.Second {
			t.Fatalf("%d after %s", resp.StatusCode, time.Since(start))
		}
		if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
			t.Fatalf("body %q %v", b, err)
		}
	})
}

func TestAppendWatchObject(t *testing.T) {
	c := cached{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod"}
	cases := []struct {
		name, in string
		want     map[string]any // nil: an error
	}{
		{"typed, with a version", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"12"},"spec":{}}`,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "a", "resourceVersion": "tok"}, "spec": map[string]any{}}},
		{"listed from a member: no kind", `{"metadata":{"name":"a","resourceVersion":"12"}}`,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "a", "resourceVersion": "tok"}}},
		{"metadata without a version, spaced", ` { "metadata" : { "name" : "a" } , "x" : [1, {"resourceVersion":"no"}] } `,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "a", "resourceVersion": "tok"}, "x": []any{1.0, map[string]any{"resourceVersion": "no"}}}},
		{"empty metadata", `{"apiVersion":"v1","metadata":{}}`,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "tok"}}},
		{"no metadata", `{"kind":"Pod","spec":{}}`,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "tok"}, "spec": map[string]any{}}},
		{"empty object", `{}`, map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "tok"}}},
		{"escaped version", `{"metadata":{"resourceVersion":"a\"b"}}`,
			map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "tok"}}},
		{"not an object", `[1]`, nil},
		{"metadata not an object", `{"metadata":"x"}`, nil},
		{"trailing data", `{"metadata":{}} x`, nil},
		{"truncated", `{"metadata":{"name":"a"`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := appendWatchObject([]byte("prefix:"), c, []byte(tc.in), "tok")
			if tc.want == nil {
				if err == nil {
					t.Fatalf("no error, wrote %s", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rest, ok := bytes.CutPrefix(b, []byte("prefix:"))
			if !ok {
				t.Fatalf("did not append: %s", b)
			}
			var got map[string]any
			if err := json.Unmarshal(rest, &got); err != nil {
				t.Fatalf("%s: %v", rest, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDiscoveryNames(t *testing.T) {
	named := func(g, r, k string, short, cats []string) inventory.ResourceState {
		return inventory.ResourceState{Group: g, Version: "v1", Resource: r, Kind: k, Namespaced: true, ShortNames: short, Categories: cats}
	}
	inv := catalogOf(
		// member1's collector reports names; member2's predates them.
		&inventory.Cluster{Name: "member1", Resources: []inventory.ResourceState{
			named("stable.example.com", "crontabs", "CronTab", []string{"ct"}, []string{"fvtest"}),
			named("apps", "deployments", "Deployment", []string{"deploy"}, []string{"all"}),
			named("", "configmaps", "ConfigMap", []string{"cm", "conf"}, nil),
			named("example.com", "widgets", "Widget", nil, nil),
		}},
		&inventory.Cluster{Name: "member2", Resources: []inventory.ResourceState{
			named("stable.example.com", "crontabs", "CronTab", []string{"ctab", "ct"}, []string{"fvtest", "all"}),
			named("apps", "deployments", "Deployment", nil, nil),
			named("", "pods", "Pod", nil, nil),
			named("", "configmaps", "ConfigMap", nil, nil),
		}},
	)
	aggregated := "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	get := func(t *testing.T, path, accept string) []byte {
		t.Helper()
		h := New(&fakeQuery{}, inv, nil, nil)
		r := httptest.NewRequest("GET", path, nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	// names is "resource:short,names:categories" per resource, from the
	// legacy document of each group/version or from the aggregated ones.
	names := func(t *testing.T, prefix string, agg bool) map[string]string {
		t.Helper()
		out := map[string]string{}
		add := func(r string, short, cats []string) {
			out[r] = strings.Join(short, ",") + ":" + strings.Join(cats, ",")
		}
		if agg {
			for _, root := range []string{"/api", "/apis"} {
				var l apidiscoveryv2.APIGroupDiscoveryList
				if err := json.Unmarshal(get(t, prefix+root, aggregated), &l); err != nil {
					t.Fatal(err)
				}
				for _, g := range l.Items {
					for _, v := range g.Versions {
						for _, r := range v.Resources {
							add(r.Resource, r.ShortNames, r.Categories)
						}
					}
				}
			}
			return out
		}
		var groups metav1.APIGroupList
		if err := json.Unmarshal(get(t, prefix+"/apis", ""), &groups); err != nil {
			t.Fatal(err)
		}
		gvs := []string{"/api/v1"}
		for _, g := range groups.Groups {
			for _, v := range g.Versions {
				gvs = append(gvs, "/apis/"+v.GroupVersion)
			}
		}
		for _, gv := range gvs {
			var l metav1.APIResourceList
			if err := json.Unmarshal(get(t, prefix+gv, ""), &l); err != nil {
				t.Fatal(err)
			}
			for _, r := range l.APIResources {
				add(r.Name, r.ShortNames, r.Categories)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name, prefix string
		want         map[string]string
	}{
		{"fleet: a custom resource's names all its clusters agree on, a built-in's the hub's own", "", map[string]string{
			"crontabs":    "ct:fvtest", // what both report
			"deployments": "deploy:all",
			"configmaps":  "cm:", // a record's extra names are not a built-in's
			"pods":        "po:all",
			"widgets":     ":", // a custom resource without names
		}},
		{"member2's view: the same names, member2's resources", "/clusters/member2", map[string]string{
			"crontabs":    "ct:fvtest",
			"deployments": "deploy:all",
			"configmaps":  "cm:",
			"pods":        "po:all",
		}},
	} {
		for _, agg := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s (aggregated %v)", tc.name, agg), func(t *testing.T) {
				if got := names(t, tc.prefix, agg); !maps.Equal(got, tc.want) {
					t.Errorf("got  %v\nwant %v", got, tc.want)
				}
			})
		}
	}
}

// writesRecorder counts the writes a list takes.
type writesRecorder struct {
	bytes.Buffer
	writes int
}

func (w *writesRecorder) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestWriteListInChunks: a list larger than a chunk is written in several
// writes and is still one valid <Kind>List with every item typed, in order.
func TestWriteListInChunks(t *testing.T) {
	c := cached{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, kind: "Deployment"}
	var items [][]byte
	pad := strings.Repeat("x", 2500)
	for i := range 1200 {
		switch i % 3 {
		case 0:
			items = append(items, fmt.Appendf(nil, `{"metadata":{"name":"d%d"},"spec":{"pad":%q}}`, i, pad))
		case 1:
			items = append(items, fmt.Appendf(nil, ` {"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d%d"}}`, i))
		default:
			items = append(items, []byte(`{}`))
		}
	}
	rem := int64(7)
	var w writesRecorder
	if err := writeList(&w, c, metav1.ListMeta{ResourceVersion: "rv1", Continue: "next", RemainingItemCount: &rem}, items); err != nil {
		t.Fatal(err)
	}
	if w.writes < 3 {
		t.Fatalf("%d bytes in %d writes: not chunked", w.Len(), w.writes)
	}
	var got struct {
		Kind, APIVersion string
		Metadata         metav1.ListMeta
		Items            []map[string]any
	}
	if err := json.Unmarshal(w.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if got.Kind != "DeploymentList" || got.APIVersion != "apps/v1" || got.Metadata.ResourceVersion != "rv1" || got.Metadata.Continue != "next" || *got.Metadata.RemainingItemCount != 7 {
		t.Fatalf("list meta %s %s %+v", got.Kind, got.APIVersion, got.Metadata)
	}
	if len(got.Items) != len(items) {
		t.Fatalf("%d items, want %d", len(got.Items), len(items))
	}
	for i, it := range got.Items {
		if it["kind"] != "Deployment" || it["apiVersion"] != "apps/v1" {
			t.Fatalf("item %d: kind %v apiVersion %v", i, it["kind"], it["apiVersion"])
		}
		if md, _ := it["metadata"].(map[string]any); i%3 != 2 && md["name"] != fmt.Sprintf("d%d", i) {
			t.Fatalf("item %d out of order: %v", i, md["name"])
		}
	}
}

// TestTableRowSpans: a Table written from the row spans the store kept
// is byte for byte the Table written by reading each object, for every
// includeObject; spans that do not fit their object (a corrupt or foreign
// store) are not trusted and the row reads the object instead.
func TestTableRowSpans(t *testing.T) {
	const n = 40
	items, cells := make([][]byte, n), make([][]byte, n)
	spans := make([]uint32, 0, 8*n)
	for i := range items {
		items[i] = podjson.Pod("member1", i, 3)
		cells[i] = fmt.Appendf(nil, `[%q,"1/1","Running","0","3h","10.0.0.%d","node-a"]`, podjson.PodName(i), i)
		r, err := rawjson.FindRowSpans(items[i], clusterAnnotation)
		if err != nil {
			t.Fatal(err)
		}
		spans = r.Offsets(spans)
	}
	corrupt := slices.Clone(spans)
	for i := range n {
		switch i % 3 {
		case 0:
			corrupt[8*i+1] = 1 << 30 // metadata past the end
		case 1:
			corrupt[8*i+2], corrupt[8*i+3] = 0, 5 // name outside the metadata
		default:
			corrupt[8*i] = corrupt[8*i] + 1 // metadata not at its brace
		}
	}
	c := cached{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true, columns: podColumns}
	h := &Handler{}
	for _, include := range []metav1.IncludeObjectPolicy{metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject} {
		write := func(sp []uint32) string {
			var b bytes.Buffer
			if err := h.writeTable(&b, c, metav1.ListMeta{ResourceVersion: "7"}, include, items, cells, sp); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		read := write(nil)
		if !json.Valid([]byte(read)) || strings.Count(read, `{"cells":[`) != n {
			t.Fatalf("%s: not a Table of %d rows: %.300s", include, n, read)
		}
		if got := write(spans); got != read {
			t.Errorf("%s: with row spans\n%.400s\nwant\n%.400s", include, got, read)
		}
		if got := write(corrupt); got != read {
			t.Errorf("%s: with corrupt row spans\n%.400s\nwant\n%.400s", include, got, read)
		}
	}
}
