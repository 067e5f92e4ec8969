package materializer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetview/fleetview/internal/stream"
)

// Metrics counts what a materializer did since it started.
type Metrics struct {
	// Applied counts events handed to the sink and committed.
	Applied atomic.Uint64
	// Batches counts committed batches.
	Batches atomic.Uint64
	// Skipped counts object events left to another materializer (Filter).
	Skipped atomic.Uint64
	// DeadLettered counts poison events moved to the dead-letter stream.
	DeadLettered atomic.Uint64
	// SinkErrors counts failures of the sink (a Badger or OpenSearch write
	// that failed for good): each ends Run.
	SinkErrors atomic.Uint64
	// ConsumerErrors counts consumers that stopped for another reason (a
	// lost stream or connection) and are restarted.
	ConsumerErrors atomic.Uint64
}

// MetricsConfig configures the Prometheus collector of a process's
// materializers.
type MetricsConfig struct {
	// JetStream reads each cluster stream's last sequence at scrape time,
	// for the lag.
	JetStream jetstream.JetStream
	// Materializers are the materializers now running; called at each
	// scrape, since registries can add and remove backends.
	Materializers func() []*Materializer
	// Timeout bounds the stream lookups of one scrape (default 5s): a
	// scrape must answer even when NATS does not.
	Timeout time.Duration
}

// Validate reports what is missing.
func (c MetricsConfig) Validate() error {
	var errs []error
	if c.JetStream == nil {
		errs = append(errs, errors.New("JetStream is required"))
	}
	if c.Materializers == nil {
		errs = append(errs, errors.New("Materializers is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %s is negative", c.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// collector exports the materializers' counters and, per cluster stream,
// how far each is behind the stream. Values are read at scrape time from
// what the materializers keep anyway, so applying an event costs nothing
// more. Cardinality: materializers times clusters consumed; no object,
// resource or namespace label.
type collector struct {
	cfg                                                 MetricsConfig
	applied, batches, skipped, dead, sinkErrs, consErrs *prometheus.Desc
	appliedSeq, lastSeq, lag, lookupErrs                *prometheus.Desc
	lookupFailures                                      atomic.Uint64
}

// NewMetricsCollector builds the Prometheus collector of cfg's
// materializers, to register on the process's registry.
func NewMetricsCollector(cfg MetricsConfig) (prometheus.Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	m := []string{"materializer"}
	mc := []string{"materializer", "cluster"}
	return &collector{
		cfg:        cfg,
		applied:    prometheus.NewDesc("fleetview_materializer_events_applied_total", "Events committed to the backend.", m, nil),
		batches:    prometheus.NewDesc("fleetview_materializer_batches_total", "Batches committed to the backend.", m, nil),
		skipped:    prometheus.NewDesc("fleetview_materializer_events_skipped_total", "Object events routed to another backend.", m, nil),
		dead:       prometheus.NewDesc("fleetview_materializer_dead_letters_total", "Poison events moved to the dead-letter stream FV_DEAD.", m, nil),
		sinkErrs:   prometheus.NewDesc("fleetview_materializer_sink_errors_total", "Backend (Badger, OpenSearch) writes that failed for good; each stops the materializer.", m, nil),
		consErrs:   prometheus.NewDesc("fleetview_materializer_consumer_errors_total", "Stream consumers that stopped for another reason than the backend (lost stream or connection) and were restarted.", m, nil),
		appliedSeq: prometheus.NewDesc("fleetview_materializer_applied_sequence", "Last stream sequence applied, per cluster stream.", mc, nil),
		lastSeq:    prometheus.NewDesc("fleetview_stream_last_sequence", "Last sequence of a member cluster's stream, read at scrape time.", []string{"cluster"}, nil),
		lag:        prometheus.NewDesc("fleetview_materializer_lag_messages", "Stream messages not yet applied (stream last sequence minus applied sequence), per materializer and cluster, read at scrape time.", mc, nil),
		lookupErrs: prometheus.NewDesc("fleetview_materializer_lag_lookup_errors_total", "Scrapes that could not read a cluster stream's last sequence (the lag of that cluster is then missing from the scrape).", nil, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.applied, c.batches, c.skipped, c.dead, c.sinkErrs, c.consErrs, c.appliedSeq, c.lastSeq, c.lag, c.lookupErrs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ms := c.cfg.Materializers()
	clusters := map[string]bool{}
	applied := make([]map[string]uint64, len(ms))
	for i, m := range ms {
		name := m.cfg.Name
		for _, v := range []struct {
			d *prometheus.Desc
			n uint64
		}{
			{c.applied, m.metrics.Applied.Load()}, {c.batches, m.metrics.Batches.Load()},
			{c.skipped, m.metrics.Skipped.Load()}, {c.dead, m.metrics.DeadLettered.Load()},
			{c.sinkErrs, m.metrics.SinkErrors.Load()}, {c.consErrs, m.metrics.ConsumerErrors.Load()},
		} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), name)
		}
		applied[i] = m.Applied()
		for cl, seq := range applied[i] {
			clusters[cl] = true
			ch <- prometheus.MustNewConstMetric(c.appliedSeq, prometheus.GaugeValue, float64(seq), name, cl)
		}
	}
	names := make([]string, 0, len(clusters))
	for cl := range clusters {
		names = append(names, cl)
	}
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	for _, cl := range names {
		st, err := c.cfg.JetStream.Stream(ctx, stream.StreamName(cl))
		if err != nil {
			c.lookupFailures.Add(1)
			continue
		}
		last := st.CachedInfo().State.LastSeq
		ch <- prometheus.MustNewConstMetric(c.lastSeq, prometheus.GaugeValue, float64(last), cl)
		for i, m := range ms {
			seq, ok := applied[i][cl]
			if !ok {
				continue
			}
			var behind uint64
			if last > seq {
				behind = last - seq
			}
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(behind), m.cfg.Name, cl)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.lookupErrs, prometheus.CounterValue, float64(c.lookupFailures.Load()))
}
