package queryapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// The API surfaces a call comes through, the "surface" label. REST and the
// Kubernetes API reach the services in-process (inproc.go), through the
// same interceptors as the gRPC port; routes marks their requests so the
// interceptor can tell them apart.
const (
	SurfaceGRPC = "grpc"
	SurfaceREST = "rest"
	SurfaceKube = "kube"
)

// Why a watch ended, the "reason" label of fleetview_query_watches_ended_total.
const (
	watchEndClosed  = "closed"   // the client went away
	watchEndTooSlow = "too_slow" // its buffer filled: the client did not keep up
	watchEndError   = "error"    // anything else (server stopping, expired resourceVersion, backend)
)

// Metrics are the query API's Prometheus metrics. One value per server,
// registered on the process's registry (never the global one), so two
// servers in one test process do not collide.
//
// Labels are bounded: surface (3), verb (5), method (the services'
// methods), code (gRPC codes), reason (3). No resource or client label:
// those grow with what is cached and who asks. The one cluster label is on
// malformed objects skipped and member RBAC objects refused, which an
// operator must trace to the cluster (its collector) that wrote them; it
// grows with the fleet at most.
type Metrics struct {
	duration     *prometheus.HistogramVec
	requests     *prometheus.CounterVec
	watches      *prometheus.GaugeVec
	watchEvents  *prometheus.CounterVec
	watchesEnded *prometheus.CounterVec
	malformed    *prometheus.CounterVec
	// Acting through (issue #30).
	actRequests  *prometheus.CounterVec
	actDuration  *prometheus.HistogramVec
	actCacheWait *prometheus.HistogramVec
	// The relay's requests in flight and the limits' refusals (issue #43).
	actInflight *prometheus.GaugeVec
	actStreams  *prometheus.GaugeVec
	actRefused  *prometheus.CounterVec
	rbacRefused *prometheus.CounterVec
}

// NewMetrics creates the query API's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleetview_query_request_duration_seconds",
			Help: "Time to answer a query API call, per surface (grpc, rest, kube), verb and method. For a watch: the time until it has sent its initial state or replay and follows the live feed.",
			// From a cached get (sub-millisecond) to a large list or a
			// replaying watch (seconds).
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"surface", "verb", "method"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_query_requests_total",
			Help: "Query API calls ended, per surface, verb, method and gRPC code (code!=\"OK\" are the errors; a watch counts when it ends).",
		}, []string{"surface", "verb", "method", "code"}),
		watches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetview_query_watches",
			Help: "Watches open now, per surface.",
		}, []string{"surface"}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_query_watch_events_sent_total",
			Help: "Watch events (including bookmarks) handed to clients, per surface.",
		}, []string{"surface"}),
		watchesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_query_watches_ended_total",
			Help: "Watches ended, per surface and reason: closed (the client went away), too_slow (dropped: the client did not read its events fast enough), error.",
		}, []string{"surface", "reason"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_query_malformed_objects_skipped_total",
			Help: "Stored objects left out of an answer (list, search, watch, Table) because they are not valid JSON within rawjson's bounds, per cluster that wrote them. Each answer that met one counts it once.",
		}, []string{"cluster"}),
		actRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_act_requests_total",
			Help: "Requests the Kubernetes API forwarded (or refused to forward) to a member through its collector (--act-through), per cluster, verb and the HTTP status the client got (the member's own, or the hub's refusal: 403, 429, 503, 504).",
		}, []string{"cluster", "verb", "code"}),
		actDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetview_act_request_duration_seconds",
			Help:    "Time from a forwarded request's arrival to the end of its answer, per verb (a followed log or a watch: its whole life).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}, []string{"verb"}),
		actCacheWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetview_act_cache_wait_seconds",
			Help:    "How long a forwarded write's answer waited for the cache to hold what the member wrote (read your writes), per whether the cache caught up within the bound.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"caught_up"}),
		actInflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetview_act_inflight_requests",
			Help: "Forwarded requests in flight to a member through its collector now, streams included, per cluster (at most --act-through-cluster-requests).",
		}, []string{"cluster"}),
		actStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetview_act_inflight_streams",
			Help: "Forwarded watches and followed logs held open to a member now, per cluster (at most --act-through-cluster-streams).",
		}, []string{"cluster"}),
		actRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_act_refused_total",
			Help: "Forwarded requests refused 429 by a limit of the hub, per cluster and limit: caller-rate (--act-through-rate), caller-requests, caller-streams, cluster-requests, cluster-streams (--act-through-<limit>).",
		}, []string{"cluster", "limit"}),
		rbacRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetview_memberrbac_objects_refused_total",
			Help: "RBAC objects of a member cluster the hub refused to apply to that member's authorizer (member-RBAC modes), per cluster that wrote them: malformed, or not a valid object of its resource. The log says which and why.",
		}, []string{"cluster"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.requests, m.watches, m.watchEvents, m.watchesEnded, m.malformed, m.rbacRefused, m.actRequests, m.actDuration, m.actCacheWait, m.actInflight, m.actStreams, m.actRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// The gauge and the drop counter exist from the start, so a dashboard
	// and an alert see 0 rather than no series.
	for _, s := range []string{SurfaceGRPC, SurfaceREST, SurfaceKube} {
		m.watches.WithLabelValues(s)
		m.watchEvents.WithLabelValues(s)
		m.watchesEnded.WithLabelValues(s, watchEndTooSlow)
	}
	return m, nil
}

// RBACObjectRefused counts a member's RBAC object the follower refused.
func (m *Metrics) RBACObjectRefused(cluster string) {
	if m != nil {
		m.rbacRefused.WithLabelValues(cluster).Inc()
	}
}

type internalKey struct{}

// internal marks the calls the server makes of its own services (the RBAC
// follower's watches): no client's, so no client's metrics.
func internal(ctx context.Context) context.Context {
	return context.WithValue(ctx, internalKey{}, true)
}

func internalCall(ctx context.Context) bool { v, _ := ctx.Value(internalKey{}).(bool); return v }

type surfaceKey struct{}

// withSurface marks the requests h serves as coming through surface.
func withSurface(surface string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), surfaceKey{}, surface)))
	})
}

// surfaceOf is the surface of a call: the mark of the HTTP route it came
// through, or gRPC.
func surfaceOf(ctx context.Context) string {
	if s, ok := ctx.Value(surfaceKey{}).(string); ok {
		return s
	}
	return SurfaceGRPC
}

// methodName is the last element of a full gRPC method name.
func methodName(full string) string { return full[strings.LastIndex(full, "/")+1:] }

// Unary is the unary interceptor: first in the chain, so calls the Guard
// refuses are measured too.
func (m *Metrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if authz.OpenMethod(info.FullMethod) {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	m.observe(surfaceOf(ctx), info.FullMethod, time.Since(start), err, true)
	return resp, err
}

type metricsStartKey struct{}

// watchStarted is called by a watch once it has started (its initial
// state or replay is done and it follows the live feed): its audit line
// and its latency are taken then.
func watchStarted(ctx context.Context) {
	authz.WatchStarted(ctx)
	if f, ok := ctx.Value(metricsStartKey{}).(func()); ok {
		f() // the watch's latency
	}
}

// Stream is the stream interceptor. A watch lives as long as its client
// wants, so its latency is the time until it started (watchStarted), or
// until it failed if it never did.
func (m *Metrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if authz.OpenMethod(info.FullMethod) {
		return handler(srv, ss)
	}
	surface, start := surfaceOf(ss.Context()), time.Now()
	var once sync.Once
	observed := func(err error) {
		once.Do(func() { m.observe(surface, info.FullMethod, time.Since(start), err, false) })
	}
	ms := &metricsStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), metricsStartKey{}, func() { observed(nil) })}
	err := handler(srv, ms)
	observed(err)
	verb, _ := authz.VerbFor(info.FullMethod)
	m.requests.WithLabelValues(surface, verb, methodName(info.FullMethod), status.Code(apierr.ToStatus(err)).String()).Inc()
	return err
}

type metricsStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *metricsStream) Context() context.Context { return s.ctx }

// observe records one call's latency and, for unary calls, its outcome.
func (m *Metrics) observe(surface, fullMethod string, d time.Duration, err error, count bool) {
	verb, _ := authz.VerbFor(fullMethod)
	method := methodName(fullMethod)
	m.duration.WithLabelValues(surface, verb, method).Observe(d.Seconds())
	if count {
		m.requests.WithLabelValues(surface, verb, method, status.Code(apierr.ToStatus(err)).String()).Inc()
	}
}

// watchMetrics are one watch's handles on the metrics; the zero value
// (metrics off) records nothing.
type watchMetrics struct {
	m       *Metrics
	surface string
	sent    prometheus.Counter
}

// watchOpened counts an open watch; ended takes it back with the reason.
func (m *Metrics) watchOpened(ctx context.Context) watchMetrics {
	if m == nil || internalCall(ctx) {
		return watchMetrics{}
	}
	s := surfaceOf(ctx)
	m.watches.WithLabelValues(s).Inc()
	return watchMetrics{m: m, surface: s, sent: m.watchEvents.WithLabelValues(s)}
}

// eventSent counts one event handed to the client.
func (w watchMetrics) eventSent() {
	if w.sent != nil {
		w.sent.Inc()
	}
}

// ended closes the watch's account with why it ended.
func (w watchMetrics) ended(ctx context.Context, err error) {
	if w.m == nil {
		return
	}
	reason := watchEndError
	switch {
	case errors.Is(err, query.ErrTooSlow):
		reason = watchEndTooSlow
	case err == nil, ctx.Err() != nil, errors.Is(err, context.Canceled):
		reason = watchEndClosed
	}
	w.m.watches.WithLabelValues(w.surface).Dec()
	w.m.watchesEnded.WithLabelValues(w.surface, reason).Inc()
}
