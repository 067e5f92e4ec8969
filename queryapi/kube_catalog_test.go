package queryapi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// benchReader answers every Get with one small Pod of the asked cluster.
type benchReader struct{}

func (benchReader) Get(_ context.Context, o query.GetOptions) (query.Object, error) {
	return query.Object{Cluster: o.Cluster, JSON: []byte(`{"metadata":{"name":"` + o.Name + `","namespace":"` + o.Namespace + `"}}`)}, nil
}
func (benchReader) List(context.Context, query.ListOptions) (query.Page, error) {
	return query.Page{}, nil
}
func (benchReader) Versions(context.Context) (query.Version, error) { return query.Version{}, nil }

// BenchmarkKubeGetPerCluster measures a per-cluster Kubernetes GET of one
// object with 3 and with 200 member clusters in the inventory (synthetic
// records and streams on an embedded NATS server; the object read is a
// fake): the cost of learning the resource's kind and scope must not grow
// with clusters the request does not touch. Each request carries its own
// Authorization header, as requests of many kubectl users do.
func BenchmarkKubeGetPerCluster(b *testing.B) {
	for _, n := range []int{3, 200} {
		b.Run("clusters="+strconv.Itoa(n), func(b *testing.B) {
			h, stop := benchServer(b, n)
			defer stop()
			path := "/clusters/c0001/api/v1/namespaces/small/pods/small-001"
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := httptest.NewRequest("GET", path, nil)
				r.Header.Set("Authorization", "Bearer t"+strconv.Itoa(i))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
				}
			}
		})
	}
}

// benchServer runs a query API over n clusters' inventory records, each
// with a synced pods resource and a cluster stream, and returns its HTTP
// handler once a GET succeeds.
func benchServer(b testing.TB, n int, interceptors ...grpc.UnaryServerInterceptor) (http.Handler, func()) {
	return guardedBenchServer(b, n, nil, "", interceptors...)
}

// guardedBenchServer is benchServer with g authorizing (nil: none), whose
// readiness probe sends probeToken.
func guardedBenchServer(b testing.TB, n int, g *authz.Guard, probeToken string, interceptors ...grpc.UnaryServerInterceptor) (http.Handler, func()) {
	_, _, js := natstest.Start(b, -1)
	ctx, cancel := context.WithCancel(context.Background())
	inv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	reg := &registry.ResourceRegistry{}
	reg.APIVersion, reg.Kind, reg.Name = "fleetview.io/v1alpha1", "ResourceRegistry", "pods"
	reg.Spec.ResourceSelectors = []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}}
	if _, err := regs.Apply(ctx, reg); err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("c%04d", i)
		if _, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig(name, 1, 1<<20)); err != nil {
			b.Fatal(err)
		}
		rec := &inventory.Cluster{Name: name, KubernetesVersion: "v1.37.2", Ready: true, Heartbeat: time.Now(),
			Resources: []inventory.ResourceState{
				{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, ShortNames: []string{"po"}, Synced: true, ObjectCount: 100},
				{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Synced: true, ObjectCount: 20, Message: "not selected"},
			}}
		if err := inventory.Put(ctx, inv, rec); err != nil {
			b.Fatal(err)
		}
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Reader: benchReader{}, Registries: regs, Inventory: inv, JetStream: js, GRPCListener: gl, HTTPListener: hl,
		Applied: func() map[string]uint64 { return nil }, UnaryInterceptors: interceptors, Guard: g})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := func() {
		cancel()
		<-done
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/clusters/c0001/api/v1/namespaces/small/pods/small-001", nil)
		if probeToken != "" {
			r.Header.Set("Authorization", "Bearer "+probeToken)
		}
		s.http.Handler.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("not serving: %d %s", w.Code, w.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s.http.Handler, stop
}

// A Kubernetes read writes one audit line, its own; discovery writes none:
// the kind and scope come from the process's catalog, not from a call.
func TestKubeAuditLines(t *testing.T) {
	var buf bytes.Buffer
	a := &authz.Audit{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	h, stop := benchServer(t, 3, a.Unary)
	defer stop()
	buf.Reset() // the probe's GETs
	for _, tc := range []struct {
		path  string
		lines int
	}{
		{"/api/v1", 0},
		{"/apis", 0},
		{"/version", 0},
		{"/clusters/c0002/api/v1/namespaces/small/pods/small-001", 1},
		{"/api/v1/namespaces/small/pods", 1},
	} {
		buf.Reset()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", tc.path, w.Code, w.Body)
		}
		if n := bytes.Count(buf.Bytes(), []byte("\n")); n != tc.lines {
			t.Errorf("GET %s: %d audit lines, want %d:\n%s", tc.path, n, tc.lines, buf.String())
		}
	}
}

// On the path a hub with authorization serves (audit outside the Guard, as
// the composition root chains them), a kubectl list or get is one call of
// the query service, the read itself, and one audit line: the resource's
// kind and scope and the caller's view of the catalog cost no call. A list
// outside the caller's scope is narrowed by the Guard in that one call; a
// caller without credentials is refused by the catalog's judgment, before
// any call.
func TestKubeAuditLinesThroughTheGuard(t *testing.T) {
	tokens, err := auth.LoadTokens(strings.NewReader("admin-tok,root,1,admins\nalice-tok,alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := &auth.Policy{Rules: []auth.Rule{
		{Groups: []string{"admins"}, Verbs: []string{"*"}, Resources: []string{"*"}},
		{Users: []string{"alice"}, Verbs: []string{"get", "list", "watch"}, Resources: []string{"pods"}, Clusters: []string{"c0002"}, Namespaces: []string{"small"}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	g := &authz.Guard{Tokens: tokens, Authorizer: auth.NewAuthorizer(p)}
	var buf bytes.Buffer
	a := &authz.Audit{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	var mu sync.Mutex
	var calls []string
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		calls = append(calls, info.FullMethod)
		mu.Unlock()
		return handler(ctx, req)
	}
	h, stop := guardedBenchServer(t, 3, g, "admin-tok", record, a.Unary, g.Unary)
	defer stop()
	const kubectlTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	for _, tc := range []struct {
		name, token, path, accept string
		code                      int
		calls                     []string // the query service's methods called, in order
	}{
		{"discovery", "alice-tok", "/api/v1", "", http.StatusOK, nil},
		{"aggregated discovery", "alice-tok", "/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", http.StatusOK, nil},
		{"kubectl get pods -n small (fleet view, Table)", "alice-tok", "/api/v1/namespaces/small/pods?limit=500", kubectlTable, http.StatusOK, []string{"/fleetview.v1.QueryService/List"}},
		{"kubectl get pods -n small (per-cluster view, JSON)", "alice-tok", "/clusters/c0002/api/v1/namespaces/small/pods?limit=500", "application/json", http.StatusOK, []string{"/fleetview.v1.QueryService/List"}},
		{"kubectl get pod small-001", "alice-tok", "/clusters/c0002/api/v1/namespaces/small/pods/small-001", kubectlTable, http.StatusOK, []string{"/fleetview.v1.QueryService/Get"}},
		{"kubectl get pods -A as admin", "admin-tok", "/api/v1/pods?limit=500", kubectlTable, http.StatusOK, []string{"/fleetview.v1.QueryService/List"}},
		{"a namespace outside alice's scope: narrowed, not refused", "alice-tok", "/api/v1/namespaces/other/pods?limit=500", kubectlTable, http.StatusOK, []string{"/fleetview.v1.QueryService/List"}},
		{"no credentials: refused before any call", "", "/api/v1/namespaces/small/pods?limit=500", kubectlTable, http.StatusUnauthorized, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			mu.Lock()
			calls = nil
			mu.Unlock()
			r := httptest.NewRequest("GET", tc.path, nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.accept != "" {
				r.Header.Set("Accept", tc.accept)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code {
				t.Fatalf("GET %s: %d %s, want %d", tc.path, w.Code, w.Body, tc.code)
			}
			mu.Lock()
			got := slices.Clone(calls)
			mu.Unlock()
			if !slices.Equal(got, tc.calls) {
				t.Errorf("GET %s called %v, want %v", tc.path, got, tc.calls)
			}
			if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(tc.calls) {
				t.Errorf("GET %s: %d audit lines, want %d:\n%s", tc.path, n, len(tc.calls), buf.String())
			}
		})
	}
}
