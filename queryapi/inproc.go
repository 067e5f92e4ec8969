package queryapi

import (
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// inproc is a gRPC channel to this server's own services, in-process: the
// REST gateway, the /v1 handlers and the Kubernetes API reach the services
// through it, through the same interceptors (authentication,
// authorization) as the gRPC port, but without encoding every answer to
// protobuf, framing it over HTTP/2 on loopback and decoding it again. That
// round trip was most of the server's time for a large list and, with
// 1,000 Kubernetes watchers, the CPU that delayed their events
// (docs/benchmarks/query.md).
//
// Messages are handed over, not copied: a request is copied shallowly
// into the message the handler decodes into, and an answer into the
// caller's. The services never change a message after returning or
// sending it, and callers only read answers, so sharing their byte slices
// is safe and saves copying every stored object.
//
// Only what the services use is supported: unary calls and server
// streams. Call options are ignored (no message size limits in-process,
// no header or trailer metadata). Outgoing metadata becomes the
// handler's incoming metadata, as over a connection; there is no peer,
// so client certificates do not apply (the HTTP port never asked for
// them).
type inproc struct {
	services map[string]inprocService
	unary    grpc.UnaryServerInterceptor
	stream   grpc.StreamServerInterceptor
}

type inprocService struct {
	impl    any
	methods map[string]grpc.MethodDesc
	streams map[string]grpc.StreamDesc
}

var _ interface {
	grpc.ClientConnInterface
	grpc.ServiceRegistrar
} = (*inproc)(nil)

func newInproc(unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *inproc {
	return &inproc{services: map[string]inprocService{}, unary: chainUnary(unary), stream: chainStream(stream)}
}

// RegisterService implements grpc.ServiceRegistrar.
func (c *inproc) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s := inprocService{impl: impl, methods: map[string]grpc.MethodDesc{}, streams: map[string]grpc.StreamDesc{}}
	for _, m := range desc.Methods {
		s.methods[m.MethodName] = m
	}
	for _, st := range desc.Streams {
		s.streams[st.StreamName] = st
	}
	c.services[desc.ServiceName] = s
}

func (c *inproc) lookup(method string) (inprocService, string, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	s, found := c.services[svc]
	if !ok || !found {
		return inprocService{}, "", status.Errorf(codes.Unimplemented, "unknown service in %s", method)
	}
	return s, name, nil
}

// serverContext gives the handler the caller's metadata as incoming.
func serverContext(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(ctx, md.Copy())
}

// handOver copies src's fields into dst (same message type), sharing
// their contents.
func handOver(dst, src any) error {
	d, ok1 := dst.(proto.Message)
	s, ok2 := src.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "in-process call: %T into %T: not protobuf messages", src, dst)
	}
	dr, sr := d.ProtoReflect(), s.ProtoReflect()
	if dr.Descriptor() != sr.Descriptor() {
		return status.Errorf(codes.Internal, "in-process call: %s into %s", sr.Descriptor().FullName(), dr.Descriptor().FullName())
	}
	proto.Reset(d)
	sr.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dr.Set(fd, v)
		return true
	})
	return nil
}

// clientError is err as a gRPC client sees it: a status.
func clientError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// Invoke implements grpc.ClientConnInterface for unary calls.
func (c *inproc) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	s, name, err := c.lookup(method)
	if err != nil {
		return err
	}
	m, ok := s.methods[name]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	out, err := m.Handler(s.impl, serverContext(ctx), func(in any) error { return handOver(in, args) }, c.unary)
	if err != nil {
		return clientError(err)
	}
	return handOver(reply, out)
}

// NewStream implements grpc.ClientConnInterface for server streams: the
// handler runs in its own goroutine until it returns or ctx ends.
func (c *inproc) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	s, name, err := c.lookup(method)
	if err != nil {
		return nil, err
	}
	sd, ok := s.streams[name]
	if !ok || sd.ClientStreams || desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "in-process: %s is not a server stream", method)
	}
	ctx, cancel := context.WithCancel(ctx)
	st := &inprocStream{ctx: ctx, sctx: serverContext(ctx), req: make(chan any, 1), msgs: make(chan any), done: make(chan struct{})}
	go func() {
		defer cancel()
		info := &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}
		var err error
		if c.stream != nil {
			err = c.stream(s.impl, (*inprocServerStream)(st), info, sd.Handler)
		} else {
			err = sd.Handler(s.impl, (*inprocServerStream)(st))
		}
		st.err = clientError(err)
		close(st.done)
	}()
	return st, nil
}

// inprocStream is the caller's side of an in-process server stream.
type inprocStream struct {
	ctx, sctx context.Context
	req       chan any
	msgs      chan any
	done      chan struct{}
	err       error // set before done closes
	sent      bool
}

func (s *inprocStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (s *inprocStream) Trailer() metadata.MD         { return metadata.MD{} }
func (s *inprocStream) CloseSend() error             { return nil }
func (s *inprocStream) Context() context.Context     { return s.ctx }

// SendMsg hands over the one request of a server stream.
func (s *inprocStream) SendMsg(m any) error {
	if s.sent {
		return status.Error(codes.Internal, "in-process: a server stream takes one request")
	}
	s.sent = true
	s.req <- m
	return nil
}

// RecvMsg waits for the next message, the handler's end (io.EOF or its
// error) or the caller's context.
func (s *inprocStream) RecvMsg(m any) error {
	select {
	case v := <-s.msgs:
		return handOver(m, v)
	case <-s.done:
		return s.end()
	case <-s.ctx.Done():
		// The handler's end cancels ctx too: its outcome wins.
		select {
		case <-s.done:
			return s.end()
		default:
			return status.FromContextError(s.ctx.Err()).Err()
		}
	}
}

func (s *inprocStream) end() error {
	if s.err != nil {
		return s.err
	}
	return io.EOF
}

// inprocServerStream is the handler's side of the same stream.
type inprocServerStream inprocStream

func (s *inprocServerStream) SetHeader(metadata.MD) error  { return nil }
func (s *inprocServerStream) SendHeader(metadata.MD) error { return nil }
func (s *inprocServerStream) SetTrailer(metadata.MD)       {}
func (s *inprocServerStream) Context() context.Context     { return s.sctx }

// SendMsg blocks until the caller takes m, as flow control would.
func (s *inprocServerStream) SendMsg(m any) error {
	select {
	case s.msgs <- m:
		return nil
	case <-s.sctx.Done():
		return status.FromContextError(s.sctx.Err()).Err()
	}
}

// RecvMsg returns the request once, then io.EOF.
func (s *inprocServerStream) RecvMsg(m any) error {
	select {
	case v, ok := <-s.req:
		if !ok {
			return io.EOF
		}
		close(s.req)
		return handOver(m, v)
	case <-s.sctx.Done():
		return status.FromContextError(s.sctx.Err()).Err()
	}
}

// chainUnary composes interceptors, the first outermost, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return is[0](ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return chainUnary(is[1:])(ctx, req, info, h)
		})
	}
}

// chainStream composes stream interceptors like chainUnary.
func chainStream(is []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return is[0](srv, ss, info, func(srv any, ss grpc.ServerStream) error {
			return chainStream(is[1:])(srv, ss, info, h)
		})
	}
}
