package queryapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// samples is how many observations a histogram series holds.
func samples(t *testing.T, m *Metrics, surface, verb, method string) uint64 {
	t.Helper()
	var d dto.Metric
	if err := m.duration.WithLabelValues(surface, verb, method).(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Unary calls through the in-process channel (the REST and Kubernetes
// paths) are measured under the surface their HTTP route marked.
func TestMetricsUnaryPerSurface(t *testing.T) {
	for _, tc := range []struct {
		name, surface, object, code string
	}{
		{"gRPC, answered", "", "web", "OK"},
		{"REST, not found", SurfaceREST, "missing", "NotFound"},
		// Translated as the audit log records it (toStatus, queryapi/apierr).
		{"Kubernetes, a plain error", SurfaceKube, "plain-error", "Internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMetrics(t)
			local := newInproc([]grpc.UnaryServerInterceptor{m.Unary}, []grpc.StreamServerInterceptor{m.Stream})
			fleetviewv1.RegisterQueryServiceServer(local, echoService{})
			ctx, want := context.Background(), SurfaceGRPC
			if tc.surface != "" {
				ctx, want = context.WithValue(ctx, surfaceKey{}, tc.surface), tc.surface
			}
			_, _ = fleetviewv1.NewQueryServiceClient(local).Get(ctx, &fleetviewv1.GetRequest{Version: "v1", Resource: "pods", Name: tc.object})
			if got := testutil.ToFloat64(m.requests.WithLabelValues(want, "get", "Get", tc.code)); got != 1 {
				t.Errorf("requests{%s,get,Get,%s} = %v, want 1", want, tc.code, got)
			}
			if got := testutil.CollectAndCount(m.requests); got != 1 {
				t.Errorf("%d request series, want 1 (only the surface and code of the call)", got)
			}
			if n := samples(t, m, want, "get", "Get"); n != 1 {
				t.Errorf("%d latency samples, want 1", n)
			}
		})
	}
}

type testServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s testServerStream) Context() context.Context { return s.ctx }

// A watch's latency is taken when it starts, not when it ends; its outcome
// is counted when it ends.
func TestMetricsWatchLatencyAtStart(t *testing.T) {
	info := &grpc.StreamServerInfo{FullMethod: "/fleetview.v1.QueryService/Watch"}
	for _, tc := range []struct {
		name    string
		started bool
		err     error
		code    string
	}{
		{"started, then closed", true, nil, "OK"},
		{"started, then cut", true, fmt.Errorf("%w: slow", query.ErrTooSlow), "ResourceExhausted"},
		{"refused before starting", false, fmt.Errorf("%w: old", query.ErrExpired), "OutOfRange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMetrics(t)
			ctx := context.WithValue(context.Background(), surfaceKey{}, SurfaceKube)
			err := m.Stream(nil, testServerStream{ctx: ctx}, info, func(_ any, ss grpc.ServerStream) error {
				if tc.started {
					watchStarted(ss.Context())
					if n := samples(t, m, SurfaceKube, "watch", "Watch"); n != 1 {
						t.Errorf("%d latency samples once started, want 1", n)
					}
				}
				return tc.err
			})
			if !errors.Is(err, tc.err) {
				t.Fatalf("Stream returned %v, want the handler's %v", err, tc.err)
			}
			if n := samples(t, m, SurfaceKube, "watch", "Watch"); n != 1 {
				t.Errorf("%d latency samples after the end, want 1", n)
			}
			if got := testutil.ToFloat64(m.requests.WithLabelValues(SurfaceKube, "watch", "Watch", tc.code)); got != 1 {
				t.Errorf("requests{kube,watch,Watch,%s} = %v, want 1", tc.code, got)
			}
		})
	}
}

func TestWatchEndReason(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		err    error
		reason string
	}{
		{"ended without error", context.Background(), nil, watchEndClosed},
		{"client went away", cancelled, errors.New("send: transport closing"), watchEndClosed},
		{"buffer full", context.Background(), fmt.Errorf("watch: %w", errOutFull), watchEndTooSlow},
		{"too slow as the client leaves", cancelled, errOutFull, watchEndTooSlow},
		{"backend failed", context.Background(), errors.New("read: disk"), watchEndError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMetrics(t)
			ctx := context.WithValue(context.Background(), surfaceKey{}, SurfaceREST)
			w := m.watchOpened(ctx)
			if got := testutil.ToFloat64(m.watches.WithLabelValues(SurfaceREST)); got != 1 {
				t.Fatalf("open watches %v, want 1", got)
			}
			w.eventSent()
			w.ended(tc.ctx, tc.err)
			if got := testutil.ToFloat64(m.watches.WithLabelValues(SurfaceREST)); got != 0 {
				t.Errorf("open watches %v after the end, want 0", got)
			}
			if got := testutil.ToFloat64(m.watchesEnded.WithLabelValues(SurfaceREST, tc.reason)); got != 1 {
				t.Errorf("ended{rest,%s} = %v, want 1", tc.reason, got)
			}
			if got := testutil.ToFloat64(m.watchEvents.WithLabelValues(SurfaceREST)); got != 1 {
				t.Errorf("events sent %v, want 1", got)
			}
		})
	}
	// Metrics off: a nil *Metrics records nothing and does not panic.
	var off *Metrics
	w := off.watchOpened(context.Background())
	w.eventSent()
	w.ended(context.Background(), nil)
}

// Metrics live on the registry they are given: a second server on another
// registry is independent, and the same registry twice is refused.
func TestNewMetricsRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the query API's metrics twice on one registry succeeded")
	}
	if _, err := NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Errorf("a second registry: %v", err)
	}
}

// TestInternalWatchesUncounted: the server's own watches (the RBAC
// follower's) are no client's and stay out of the watch metrics.
func TestInternalWatchesUncounted(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := m.watchOpened(internal(context.Background()))
	w.eventSent()
	w.ended(context.Background(), nil)
	if got := testutil.ToFloat64(m.watches.WithLabelValues(SurfaceGRPC)); got != 0 {
		t.Fatalf("an internal watch counted: %v open", got)
	}
	if got := testutil.ToFloat64(m.watchEvents.WithLabelValues(SurfaceGRPC)); got != 0 {
		t.Fatalf("an internal watch's events counted: %v", got)
	}
	m.watchOpened(context.Background())
	if got := testutil.ToFloat64(m.watches.WithLabelValues(SurfaceGRPC)); got != 1 {
		t.Fatalf("a client's watch counted %v, want 1", got)
	}
}

// TestRBACObjectRefused: the member-RBAC follower's refusals are counted
// per cluster, and metrics that are off (nil) count nothing.
func TestRBACObjectRefused(t *testing.T) {
	m := newTestMetrics(t)
	for _, c := range []string{"a", "b", "a"} {
		m.RBACObjectRefused(c)
	}
	for cluster, want := range map[string]float64{"a": 2, "b": 1} {
		if got := testutil.ToFloat64(m.rbacRefused.WithLabelValues(cluster)); got != want {
			t.Errorf("refused objects of %s counted %v, want %v", cluster, got, want)
		}
	}
	var off *Metrics
	off.RBACObjectRefused("a")
}
