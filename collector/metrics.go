package collector

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetview/fleetview/internal/inventory"
)

// metrics are the collector's counters. They are plain atomics read at
// scrape time rather than client_golang counters: the inventory record
// carries them too (so `fleetview` clients see them), and
// PrometheusCollector exports the same values.
type metrics struct {
	upserts, tombstones, unchanged, refused, publishErrors, relists atomic.Int64
	// quotaRefused: publishes the stream refused for its byte quota (also
	// counted in publishErrors).
	quotaRefused atomic.Int64
}

func (m *metrics) snapshot() *inventory.Counters {
	return &inventory.Counters{
		Upserts: m.upserts.Load(), Tombstones: m.tombstones.Load(), Unchanged: m.unchanged.Load(),
		Refused: m.refused.Load(), PublishErrors: m.publishErrors.Load(), Relists: m.relists.Load(),
	}
}

// Counters returns the collector's counters since it started.
func (c *Collector) Counters() inventory.Counters { return *c.m.snapshot() }

// PrometheusCollector exports the counters and per-resource object counts
// to a Prometheus registry. Its series carry the cluster as a constant
// label, so the in-process collectors of `fleetview up` register side by
// side on one registry.
func (c *Collector) PrometheusCollector() prometheus.Collector {
	cl := prometheus.Labels{"cluster": c.cfg.Cluster}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	return &promCollector{c: c,
		upserts:       d("fleetview_collector_upserts_total", "Object versions published."),
		tombstones:    d("fleetview_collector_tombstones_total", "Tombstones published."),
		unchanged:     d("fleetview_collector_unchanged_total", "Listed objects not republished because the stream already held their version."),
		refused:       d("fleetview_collector_refused_objects_total", "Objects refused because they exceed the NATS max payload."),
		publishErrors: d("fleetview_collector_publish_errors_total", "Publishes that failed or were not acknowledged (each leads to a relist)."),
		quotaRefused:  d("fleetview_collector_quota_refused_total", "Publishes refused because the cluster's stream reached its byte quota (--stream-max-bytes)."),
		relists:       d("fleetview_collector_relists_total", "Relists (after a watch could not resume, a lost publish or an error)."),
		// Per resource the registries select, never per object.
		objects: d("fleetview_collector_objects", "Objects currently tracked per resource.", "group", "version", "resource", "synced"),
	}
}

type promCollector struct {
	c                                                                             *Collector
	upserts, tombstones, unchanged, refused, publishErrors, quotaRefused, relists *prometheus.Desc
	objects                                                                       *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (p *promCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.upserts, p.tombstones, p.unchanged, p.refused, p.publishErrors, p.quotaRefused, p.relists, p.objects} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *promCollector) Collect(ch chan<- prometheus.Metric) {
	m := p.c.m
	for _, v := range []struct {
		d *prometheus.Desc
		n int64
	}{
		{p.upserts, m.upserts.Load()}, {p.tombstones, m.tombstones.Load()}, {p.unchanged, m.unchanged.Load()},
		{p.refused, m.refused.Load()}, {p.publishErrors, m.publishErrors.Load()}, {p.quotaRefused, m.quotaRefused.Load()},
		{p.relists, m.relists.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n))
	}
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	for gvr, r := range p.c.running {
		ch <- prometheus.MustNewConstMetric(p.objects, prometheus.GaugeValue, float64(r.rs.count.Load()),
			gvr.Group, gvr.Version, gvr.Resource, fmt.Sprint(r.rs.synced.Load()))
	}
}
