package materializer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
)

func TestCollectorConfigValidate(t *testing.T) {
	_, _, js := natstest.Start(t, -1)
	ms := func() []*Materializer { return nil }
	for _, tc := range []struct {
		name string
		cfg  MetricsConfig
		want []string // in the error; none: valid
	}{
		{"complete", MetricsConfig{JetStream: js, Materializers: ms}, nil},
		{"nothing", MetricsConfig{}, []string{"JetStream is required", "Materializers is required"}},
		{"negative timeout", MetricsConfig{JetStream: js, Materializers: ms, Timeout: -time.Second}, []string{"Timeout -1s is negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want %q in it", err, w)
				}
			}
		})
	}
}

// The lag is the stream's last sequence minus the applied one, per
// materializer and cluster; a stream that cannot be read drops that
// cluster's lag and counts a lookup error, without failing the scrape.
func TestCollectorLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, nc, js := natstest.Start(t, -1)
	if _, _, err := stream.EnsureStream(ctx, js, "c1", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := js.Publish(ctx, "fv.ctl.c1.x", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(Config{Name: "a", NATS: nc, Sink: fakeSink{}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Name: "b", NATS: nc, Sink: fakeSink{}})
	if err != nil {
		t.Fatal(err)
	}
	a.setApplied("c1", 3)
	b.setApplied("c1", 5)
	a.setApplied("gone", 7) // its stream was deleted
	a.metrics.SinkErrors.Add(1)
	col, err := NewMetricsCollector(MetricsConfig{JetStream: js, Materializers: func() []*Materializer { return []*Materializer{a, b} }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP fleetview_materializer_lag_messages Stream messages not yet applied (stream last sequence minus applied sequence), per materializer and cluster, read at scrape time.
# TYPE fleetview_materializer_lag_messages gauge
fleetview_materializer_lag_messages{cluster="c1",materializer="a"} 2
fleetview_materializer_lag_messages{cluster="c1",materializer="b"} 0
# HELP fleetview_stream_last_sequence Last sequence of a member cluster's stream, read at scrape time.
# TYPE fleetview_stream_last_sequence gauge
fleetview_stream_last_sequence{cluster="c1"} 5
# HELP fleetview_materializer_applied_sequence Last stream sequence applied, per cluster stream.
# TYPE fleetview_materializer_applied_sequence gauge
fleetview_materializer_applied_sequence{cluster="c1",materializer="a"} 3
fleetview_materializer_applied_sequence{cluster="c1",materializer="b"} 5
fleetview_materializer_applied_sequence{cluster="gone",materializer="a"} 7
# HELP fleetview_materializer_lag_lookup_errors_total Scrapes that could not read a cluster stream's last sequence (the lag of that cluster is then missing from the scrape).
# TYPE fleetview_materializer_lag_lookup_errors_total counter
fleetview_materializer_lag_lookup_errors_total 1
# HELP fleetview_materializer_sink_errors_total Backend (Badger, OpenSearch) writes that failed for good; each stops the materializer.
# TYPE fleetview_materializer_sink_errors_total counter
fleetview_materializer_sink_errors_total{materializer="a"} 1
fleetview_materializer_sink_errors_total{materializer="b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fleetview_materializer_lag_messages", "fleetview_stream_last_sequence",
		"fleetview_materializer_applied_sequence", "fleetview_materializer_lag_lookup_errors_total", "fleetview_materializer_sink_errors_total"); err != nil {
		t.Fatal(err)
	}
}
