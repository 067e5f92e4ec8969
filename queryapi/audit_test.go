package queryapi

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// auditedService answers every read with objects in member1 and member2,
// so the Guard's narrowing shows in the audited counts.
type auditedService struct {
	fleetviewv1.UnimplementedQueryServiceServer
	watchDone chan struct{}
}

func (auditedService) List(context.Context, *fleetviewv1.ListRequest) (*fleetviewv1.ListResponse, error) {
	return &fleetviewv1.ListResponse{RawItems: [][]byte{raw("member1", "shop", "a"), raw("member1", "payments", "b"), raw("member2", "shop", "c")}}, nil
}

func (auditedService) Get(_ context.Context, req *fleetviewv1.GetRequest) (*fleetviewv1.GetResponse, error) {
	return &fleetviewv1.GetResponse{RawObject: raw("member1", req.GetNamespace(), req.GetName()), Cluster: "member1"}, nil
}

func (auditedService) Search(context.Context, *fleetviewv1.SearchRequest) (*fleetviewv1.SearchResponse, error) {
	pods := &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}
	return &fleetviewv1.SearchResponse{Items: []*fleetviewv1.SearchHit{
		{Gvr: pods, Cluster: "member1", RawObject: raw("member1", "shop", "a")},
		{Gvr: pods, Cluster: "member2", RawObject: raw("member2", "shop", "c")},
	}}, nil
}

// Watch sends one event, or (namespace "idle") only reports its start,
// then waits for the caller to leave.
func (s auditedService) Watch(req *fleetviewv1.WatchRequest, ss grpc.ServerStreamingServer[fleetviewv1.WatchEvent]) error {
	defer func() { s.watchDone <- struct{}{} }()
	if req.GetNamespace() == "idle" {
		watchStarted(ss.Context())
	} else if err := ss.Send(&fleetviewv1.WatchEvent{Type: "ADDED", Cluster: "member1", RawObject: raw("member1", "shop", "a")}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return ss.Context().Err()
}

// lockedBuffer collects log lines written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines decodes every JSON line written so far and clears them.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	l.b.Reset()
	return out
}

// TestAuditLog: every read (a list, a get, a search, a watch start, a
// refused call) is one JSON line with the caller, what was asked after
// the Guard narrowed it, how many objects went back and the result code,
// whichever way the call came (in-process from REST and Kubernetes, or
// over gRPC).
func TestAuditLog(t *testing.T) {
	buf := &lockedBuffer{}
	a := &authz.Audit{Logger: slog.New(slog.NewJSONHandler(buf, nil))}
	g := testGuard(t)
	unary := []grpc.UnaryServerInterceptor{a.Unary, g.Unary}
	streams := []grpc.StreamServerInterceptor{a.Stream, g.Stream}
	svc := auditedService{watchDone: make(chan struct{}, 4)}
	local := newInproc(unary, streams)
	fleetviewv1.RegisterQueryServiceServer(local, svc)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(streams...))
	fleetviewv1.RegisterQueryServiceServer(gs, svc)
	go func() { _ = gs.Serve(l) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	as := func(tok string) context.Context {
		if tok == "" {
			return context.Background()
		}
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	watch := func(q fleetviewv1.QueryServiceClient, tok, ns string) func() error {
		return func() error {
			ctx, cancel := context.WithCancel(as(tok))
			defer cancel()
			ws, err := q.Watch(ctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: ns})
			if err != nil {
				return err
			}
			if ns != "idle" {
				if _, err := ws.Recv(); err != nil {
					return err
				}
			} else {
				// The start line comes without any event.
				deadline := time.Now().Add(5 * time.Second)
				for buf.size() == 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}
			cancel()
			<-svc.watchDone
			return nil
		}
	}
	type want struct {
		msg, subject, verb, resource, namespace, code, transport, name string
		clusters                                                       []string
		objects                                                        int
	}
	for _, via := range []struct {
		transport string
		q         fleetviewv1.QueryServiceClient
	}{{"http", fleetviewv1.NewQueryServiceClient(local)}, {"grpc", fleetviewv1.NewQueryServiceClient(conn)}} {
		q := via.q
		cases := []struct {
			name string
			call func() error
			want want
		}{
			{"list, narrowed to the caller's cluster", func() error {
				_, err := q.List(as("alice-tok"), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
				return err
			}, want{msg: "api call", subject: "alice", verb: "list", resource: "pods", code: "OK", clusters: []string{"member1"}, objects: 2}},
			{"get", func() error {
				_, err := q.Get(as("alice-tok"), &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Namespace: "shop", Name: "a", Cluster: "member1"})
				return err
			}, want{msg: "api call", subject: "alice", verb: "get", resource: "pods", namespace: "shop", name: "a", code: "OK", clusters: []string{"member1"}, objects: 1}},
			{"search, hits the caller may see", func() error {
				_, err := q.Search(as("bob-tok"), &fleetviewv1.SearchRequest{Text: "a", Resources: []string{"core/v1/pods"}, Namespace: "shop"})
				return err
			}, want{msg: "api call", subject: "bob", verb: "search", resource: "pods", namespace: "shop", code: "OK", clusters: []string{}, objects: 2}},
			{"watch start at its first event", watch(q, "alice-tok", "shop"),
				want{msg: "watch start", subject: "alice", verb: "watch", resource: "pods", namespace: "shop", code: "OK", clusters: []string{"member1"}}},
			{"watch start without events", watch(q, "alice-tok", "idle"),
				want{msg: "watch start", subject: "alice", verb: "watch", resource: "pods", namespace: "idle", code: "OK", clusters: []string{"member1"}}},
			{"refused: no credentials", func() error {
				_, err := q.List(as(""), &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
				if status.Code(err) != codes.Unauthenticated {
					return err
				}
				return nil
			}, want{msg: "api call", verb: "list", resource: "pods", code: "Unauthenticated", clusters: []string{}}},
			{"refused: outside the caller's rules", func() error {
				_, err := q.List(as("alice-tok"), &fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments"})
				if status.Code(err) != codes.PermissionDenied {
					return err
				}
				return nil
			}, want{msg: "api call", subject: "alice", verb: "list", resource: "deployments.apps", code: "PermissionDenied", clusters: []string{}}},
			{"refused watch", func() error {
				ws, err := q.Watch(as("bob-tok"), &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"})
				if err == nil {
					_, err = ws.Recv()
				}
				if status.Code(err) != codes.PermissionDenied {
					return err
				}
				return nil
			}, want{msg: "watch start", subject: "bob", verb: "watch", resource: "pods", code: "PermissionDenied", clusters: []string{}}},
		}
		for _, tc := range cases {
			t.Run(via.transport+": "+tc.name, func(t *testing.T) {
				buf.lines(t)
				if err := tc.call(); err != nil {
					t.Fatal(err)
				}
				var lines []map[string]any
				for deadline := time.Now().Add(5 * time.Second); len(lines) == 0 && time.Now().Before(deadline); {
					lines = append(lines, buf.lines(t)...)
					time.Sleep(time.Millisecond)
				}
				if len(lines) != 1 {
					t.Fatalf("%d audit lines, want 1: %v", len(lines), lines)
				}
				got := lines[0]
				w := tc.want
				w.transport = via.transport
				for k, v := range map[string]string{"msg": w.msg, "subject": w.subject, "verb": w.verb, "resource": w.resource,
					"namespace": w.namespace, "code": w.code, "transport": w.transport} {
					if got[k] != v {
						t.Errorf("%s = %v, want %q (line %v)", k, got[k], v, got)
					}
				}
				if w.name != "" && got["name"] != w.name {
					t.Errorf("name = %v, want %q", got["name"], w.name)
				}
				var cl []string
				for _, c := range got["clusters"].([]any) {
					cl = append(cl, c.(string))
				}
				if !slices.Equal(cl, w.clusters) && !(len(cl) == 0 && len(w.clusters) == 0) {
					t.Errorf("clusters = %v, want %v", cl, w.clusters)
				}
				if got["objects"] != float64(w.objects) {
					t.Errorf("objects = %v, want %d", got["objects"], w.objects)
				}
				if _, ok := got["groups"].([]any); !ok {
					t.Errorf("groups missing: %v", got)
				}
			})
		}
	}
	// Nothing logs after the calls ended (a watch has exactly one line).
	time.Sleep(20 * time.Millisecond)
	if extra := buf.lines(t); len(extra) != 0 {
		t.Fatalf("lines after the calls: %v", extra)
	}
}

func (l *lockedBuffer) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}
