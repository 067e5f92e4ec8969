package authz

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/kubepath"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

// Audit writes one structured line per API call: who asked (the subject
// the Guard authenticated), the verb, resource, namespace and clusters
// (after the Guard narrowed them to the caller's scope), how many objects
// went back and the result code. Watches get their line when they start
// (or fail to). It is an interceptor pair like the Guard's, and must come
// first in the chain: outside the Guard it also sees the calls the Guard
// refuses. The REST, /v1 and Kubernetes paths reach the services through
// the same chain in-process (inproc.go), so one Audit covers every
// protocol; "transport" says which way a call came.
type Audit struct {
	// Logger receives the lines (a JSON handler gives one JSON object per
	// line).
	Logger *slog.Logger
}

// auditRecord is what the inner interceptors and the service tell the
// audit about one call.
type auditRecord struct {
	mu     sync.Mutex
	user   *auth.User
	req    any
	start  time.Time
	logged bool
}

type auditKey struct{}

// noteUser records the caller the Guard authenticated.
func noteUser(ctx context.Context, u auth.User) {
	if r, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
		r.mu.Lock()
		r.user = &u
		r.mu.Unlock()
	}
}

// WatchStarted is called by a watch once it has started (its initial
// state or replay is done and it follows the live feed), so a watch that
// sends nothing for a while is still audited when it starts.
func WatchStarted(ctx context.Context) {
	if f, ok := ctx.Value(auditStartKey{}).(func()); ok {
		f()
	}
}

type auditStartKey struct{}

// Unary is the unary server interceptor.
func (a *Audit) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if slices.Contains(openMethods, info.FullMethod) {
		return handler(ctx, req)
	}
	rec := &auditRecord{req: req, start: time.Now()}
	resp, err := handler(context.WithValue(ctx, auditKey{}, rec), req)
	a.log(ctx, "api call", info.FullMethod, rec, resp, responseCount(resp, err), err)
	return resp, err
}

// Stream is the streaming server interceptor.
func (a *Audit) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if slices.Contains(openMethods, info.FullMethod) {
		return handler(srv, ss)
	}
	as := &auditStream{ServerStream: ss, a: a, method: info.FullMethod, rec: &auditRecord{start: time.Now()}}
	ctx := context.WithValue(ss.Context(), auditKey{}, as.rec)
	as.ctx = context.WithValue(ctx, auditStartKey{}, func() { as.started(nil) })
	err := handler(srv, as)
	as.started(err)
	return err
}

// auditStream logs its watch once: at the start the service reports, at
// the first message sent, or when the handler returns, whichever is first.
type auditStream struct {
	grpc.ServerStream
	a      *Audit
	method string
	rec    *auditRecord
	ctx    context.Context
}

func (s *auditStream) Context() context.Context { return s.ctx }

func (s *auditStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.rec.mu.Lock()
		if s.rec.req == nil {
			s.rec.req = m // the Guard narrows it in place after this returns
		}
		s.rec.mu.Unlock()
	}
	return err
}

func (s *auditStream) SendMsg(m any) error {
	s.started(nil)
	return s.ServerStream.SendMsg(m)
}

func (s *auditStream) started(err error) {
	s.rec.mu.Lock()
	done := s.rec.logged
	s.rec.logged = true
	s.rec.mu.Unlock()
	if !done {
		s.a.log(s.ServerStream.Context(), "watch start", s.method, s.rec, nil, 0, err)
	}
}

// responseCount is the number of objects in an answer.
func responseCount(resp any, err error) int {
	if err != nil {
		return 0
	}
	switch r := resp.(type) {
	case *fleetviewv1.ListResponse:
		return len(r.GetItems()) + len(r.GetRawItems())
	case *fleetviewv1.GetResponse:
		return 1
	case *fleetviewv1.SearchResponse:
		return len(r.GetItems())
	case *fleetviewv1.ListChangesResponse:
		return len(r.GetChanges())
	case *fleetviewv1.ListRevisionsResponse:
		return len(r.GetRevisions())
	case *fleetviewv1.ListClustersResponse:
		return len(r.GetClusters())
	case *fleetviewv1.Cluster:
		return 1
	case *fleetviewv1.ListRegistriesResponse:
		return len(r.GetRegistries())
	case *fleetviewv1.Registry:
		return 1
	}
	return 0
}

func (a *Audit) log(ctx context.Context, msg, method string, rec *auditRecord, resp any, objects int, err error) {
	rec.mu.Lock()
	user, req := rec.user, rec.req
	rec.mu.Unlock()
	verb, resource := VerbFor(method)
	var namespace, name string
	var clusters []string
	switch r := req.(type) {
	case *fleetviewv1.SearchRequest:
		resource = searchResources(r.GetResources())
		namespace, clusters = r.GetNamespace(), r.GetClusters()
	case *fleetviewv1.ListChangesRequest:
		resource = changedResources(r.GetResources())
		namespace = r.GetNamespace()
	case resourceRequest:
		if resource == "" {
			resource = resourceName(r)
		}
		namespace = r.GetNamespace()
	}
	switch r := req.(type) {
	case clustersRequest:
		clusters = r.GetClusters()
	case *fleetviewv1.ListRevisionsRequest:
		name = r.GetName()
		if c := r.GetCluster(); c != "" {
			clusters = []string{c}
		}
	case *fleetviewv1.GetRequest:
		name = r.GetName()
		if c := r.GetCluster(); c != "" {
			clusters = []string{c}
		} else if g, ok := resp.(*fleetviewv1.GetResponse); ok && g.GetCluster() != "" {
			clusters = []string{g.GetCluster()}
		}
	case interface{ GetName() string }:
		name = r.GetName()
	}
	transport := "http" // in-process, from the REST and Kubernetes handlers
	if _, ok := peer.FromContext(ctx); ok {
		transport = "grpc"
	}
	attrs := []slog.Attr{
		slog.String("subject", ""), slog.Any("groups", []string{}),
		slog.String("verb", verb), slog.String("resource", resource),
		slog.String("namespace", namespace), slog.Any("clusters", nonNil(clusters)),
		slog.Int("objects", objects), slog.String("code", status.Code(apierr.ToStatus(err)).String()),
		slog.String("method", method), slog.String("transport", transport),
		slog.Float64("durationMs", float64(time.Since(rec.start).Microseconds())/1000),
	}
	if user != nil {
		attrs[0], attrs[1] = slog.String("subject", user.Name), slog.Any("groups", nonNil(user.Groups))
	}
	if name != "" {
		attrs = append(attrs, slog.String("name", name))
	}
	a.Logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, msg, attrs...)
}

// searchResources names a search's resources as policies do ("*": all).
func searchResources(rs []string) string {
	if len(rs) == 0 {
		return "*"
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		p := strings.Split(r, "/")
		if len(p) != 3 {
			out = append(out, r)
			continue
		}
		out = append(out, auth.Resource(kubepath.GroupFromName(p[0]), p[2]))
	}
	return strings.Join(out, ",")
}

// nonNil makes "none" a JSON [] rather than null, so every line has the
// same shape.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
