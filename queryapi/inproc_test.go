package queryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// echoService answers from its requests, so a test sees what reached it.
type echoService struct {
	fleetviewv1.UnimplementedQueryServiceServer
	watchEnded chan error
}

func caller(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return strings.Join(md.Get("authorization"), ",")
}

func (echoService) Get(ctx context.Context, req *fleetviewv1.GetRequest) (*fleetviewv1.GetResponse, error) {
	if req.GetName() == "missing" {
		return nil, status.Error(codes.NotFound, "no such object")
	}
	if req.GetName() == "plain-error" {
		return nil, errors.New("not a status")
	}
	return &fleetviewv1.GetResponse{RawObject: []byte(`{"name":"` + req.GetName() + `"}`), Cluster: caller(ctx)}, nil
}

func (s echoService) Watch(req *fleetviewv1.WatchRequest, ss grpc.ServerStreamingServer[fleetviewv1.WatchEvent]) error {
	n := 3
	if req.GetNamespace() == "forever" {
		n = 1 << 30
	}
	for i := range n {
		ev := &fleetviewv1.WatchEvent{Type: "ADDED", Cluster: caller(ss.Context()), ResourceVersion: fmt.Sprint(i)}
		if err := ss.Send(ev); err != nil {
			s.watchEnded <- err
			return err
		}
	}
	if req.GetNamespace() == "fails" {
		return status.Error(codes.OutOfRange, "too old")
	}
	return nil
}

func TestInproc(t *testing.T) {
	var seen []string
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen = append(seen, "unary "+info.FullMethod+" by "+caller(ctx))
		if caller(ctx) == "Bearer denied" {
			return nil, status.Error(codes.PermissionDenied, "denied")
		}
		return h(ctx, req)
	}
	second := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen = append(seen, "second")
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		seen = append(seen, "stream "+info.FullMethod+" by "+caller(ss.Context()))
		return h(srv, ss)
	}
	svc := echoService{watchEnded: make(chan error, 1)}
	c := newInproc([]grpc.UnaryServerInterceptor{unary, second}, []grpc.StreamServerInterceptor{stream})
	fleetviewv1.RegisterQueryServiceServer(c, svc)
	q := fleetviewv1.NewQueryServiceClient(c)
	as := func(who string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", who)
	}

	t.Run("unary: interceptors in order, metadata, answer", func(t *testing.T) {
		seen = nil
		resp, err := q.Get(as("Bearer a"), &fleetviewv1.GetRequest{Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.GetRawObject()) != `{"name":"web"}` || resp.GetCluster() != "Bearer a" {
			t.Fatalf("answer %v", resp)
		}
		if want := "[unary /fleetview.v1.QueryService/Get by Bearer a second]"; fmt.Sprint(seen) != want {
			t.Fatalf("interceptors saw %v, want %s", seen, want)
		}
	})
	t.Run("unary errors are statuses", func(t *testing.T) {
		for _, tc := range []struct {
			who, name string
			code      codes.Code
		}{{"Bearer denied", "web", codes.PermissionDenied}, {"Bearer a", "missing", codes.NotFound}, {"Bearer a", "plain-error", codes.Unknown}} {
			_, err := q.Get(as(tc.who), &fleetviewv1.GetRequest{Name: tc.name})
			if status.Code(err) != tc.code {
				t.Fatalf("%s/%s: %v, want %v", tc.who, tc.name, err, tc.code)
			}
		}
	})
	t.Run("unknown methods are Unimplemented", func(t *testing.T) {
		_, err := fleetviewv1.NewClusterServiceClient(c).ListClusters(context.Background(), &fleetviewv1.ListClustersRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("%v", err)
		}
	})
	recvAll := func(ws grpc.ServerStreamingClient[fleetviewv1.WatchEvent]) ([]string, error) {
		var got []string
		for {
			ev, err := ws.Recv()
			if err != nil {
				return got, err
			}
			got = append(got, ev.GetResourceVersion()+"@"+ev.GetCluster())
		}
	}
	t.Run("stream: every message in order, then EOF", func(t *testing.T) {
		seen = nil
		ws, err := q.Watch(as("Bearer b"), &fleetviewv1.WatchRequest{Namespace: "ns"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := recvAll(ws)
		if !errors.Is(err, io.EOF) || fmt.Sprint(got) != "[0@Bearer b 1@Bearer b 2@Bearer b]" {
			t.Fatalf("got %v, %v", got, err)
		}
		if want := "[stream /fleetview.v1.QueryService/Watch by Bearer b]"; fmt.Sprint(seen) != want {
			t.Fatalf("interceptors saw %v, want %s", seen, want)
		}
	})
	t.Run("stream: the handler's error after its messages", func(t *testing.T) {
		ws, err := q.Watch(as("Bearer b"), &fleetviewv1.WatchRequest{Namespace: "fails"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := recvAll(ws)
		if status.Code(err) != codes.OutOfRange || len(got) != 3 {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("stream: the caller's cancel ends the handler", func(t *testing.T) {
		ctx, cancel := context.WithCancel(as("Bearer c"))
		ws, err := q.Watch(ctx, &fleetviewv1.WatchRequest{Namespace: "forever"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ws.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-svc.watchEnded; status.Code(err) != codes.Canceled {
			t.Fatalf("handler's send ended with %v, want Canceled", err)
		}
		if _, err := recvAll(ws); status.Code(err) != codes.Canceled {
			t.Fatalf("caller: %v, want Canceled", err)
		}
	})
}
