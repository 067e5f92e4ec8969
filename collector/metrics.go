package collector

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsnames"
)

// metrics are the collector's counters. They are plain atomics read at
// scrape time rather than client_golang counters: the inventory record
// carries them too (so `fleetview` clients see them), and
// PrometheusCollector exports the same values.
type metrics struct {
	upserts, tombstones, unchanged, refused, publishErrors, relists atomic.Int64
	// resumes: watches resumed from their last acknowledged
	// resourceVersion after a failed publish (resume.go); resumeExpired:
	// those the member answered 410 Gone, which relisted, coalescing the
	// changes since that resourceVersion.
	resumes, resumeExpired atomic.Int64
	// quotaRefused: publishes the stream refused for its byte quota (also
	// counted in publishErrors).
	quotaRefused atomic.Int64
	// hubQuotaRefused: requests the hub refused because this cluster held
	// its share of something the hub shares between clusters
	// (natsnames.ErrHubQuota: consumers, status keys, value sizes); the last
	// one goes into the inventory record, so the hub's operator sees it.
	hubQuotaRefused atomic.Int64
	lastHubRefusal  atomic.Pointer[inventory.HubRefusals]
}

// hubRefused counts err if it is the hub refusing a request over the
// cluster's quota, and reports whether it was.
func (m *metrics) hubRefused(err error) bool {
	qerr := natsnames.HubQuotaError(err)
	if qerr == nil {
		return false
	}
	n := m.hubQuotaRefused.Add(1)
	m.lastHubRefusal.Store(&inventory.HubRefusals{Count: n, Last: qerr.Error(), LastTime: time.Now().UTC()})
	return true
}

// hubRefusals is what the inventory record says of them; nil for none.
func (m *metrics) hubRefusals() *inventory.HubRefusals {
	last := m.lastHubRefusal.Load()
	if last == nil {
		return nil
	}
	r := *last
	r.Count = m.hubQuotaRefused.Load()
	return &r
}

func (m *metrics) snapshot() *inventory.Counters {
	return &inventory.Counters{
		Upserts: m.upserts.Load(), Tombstones: m.tombstones.Load(), Unchanged: m.unchanged.Load(),
		Refused: m.refused.Load(), PublishErrors: m.publishErrors.Load(), Relists: m.relists.Load(),
	}
}

// Counters returns the collector's counters since it started.
func (c *Collector) Counters() inventory.Counters { return *c.m.snapshot() }

// hubQuotaHelp is the help of fleetview_collector_hub_quota_refused_total.
const hubQuotaHelp = "Requests the hub refused because this cluster held its per-cluster share of a shared resource (consumers on the registries or its stream, registry status keys, status or inventory value size; the hub's --nats-collector-* flags)."

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
		upserts:         d("fleetview_collector_upserts_total", "Object versions published."),
		tombstones:      d("fleetview_collector_tombstones_total", "Tombstones published."),
		unchanged:       d("fleetview_collector_unchanged_total", "Listed objects not republished because the stream already held their version."),
		refused:         d("fleetview_collector_refused_objects_total", "Objects refused because they exceed the NATS max payload."),
		publishErrors:   d("fleetview_collector_publish_errors_total", "Publishes that failed or were not acknowledged (a list's leads to a relist, a watch's to a resume from its last acknowledged resourceVersion)."),
		quotaRefused:    d("fleetview_collector_quota_refused_total", "Publishes refused because the cluster's stream reached its byte quota (--stream-max-bytes)."),
		relists:         d("fleetview_collector_relists_total", "Relists (after a watch could not resume, a lost publish or an error)."),
		resumes:         d("fleetview_collector_watch_resumes_total", "Watches resumed from their last acknowledged resourceVersion after a publish failed (a NATS outage), so the member replays every change since."),
		resumeExpired:   d("fleetview_collector_resume_expired_total", "Resumes the member refused with 410 Gone (the last acknowledged resourceVersion left its watch window): the resource relisted, and its changes since that resourceVersion reached the stream as one state each."),
		hubQuotaRefused: d("fleetview_collector_hub_quota_refused_total", hubQuotaHelp),
		window:          d("fleetview_collector_publish_window", "Publishes the collector may leave unacknowledged now: it shrinks while the hub acknowledges slower than its target latency (1 s) and grows back, up to 256."),
		// Per resource the registries select, never per object.
		objects: d("fleetview_collector_objects", "Objects currently tracked per resource.", "group", "version", "resource", "synced"),
	}
}

type promCollector struct {
	c                                                                                              *Collector
	upserts, tombstones, unchanged, refused, publishErrors, quotaRefused, hubQuotaRefused, relists *prometheus.Desc
	resumes, resumeExpired                                                                         *prometheus.Desc
	objects, window                                                                                *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (p *promCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.upserts, p.tombstones, p.unchanged, p.refused, p.publishErrors, p.quotaRefused, p.hubQuotaRefused, p.relists, p.resumes, p.resumeExpired, p.objects, p.window} {
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
		{p.hubQuotaRefused, m.hubQuotaRefused.Load()},
		{p.relists, m.relists.Load()}, {p.resumes, m.resumes.Load()}, {p.resumeExpired, m.resumeExpired.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n))
	}
	ch <- prometheus.MustNewConstMetric(p.window, prometheus.GaugeValue, float64(p.c.pacer.window()))
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	for gvr, r := range p.c.running {
		ch <- prometheus.MustNewConstMetric(p.objects, prometheus.GaugeValue, float64(r.rs.ledger.size()),
			gvr.Group, gvr.Version, gvr.Resource, fmt.Sprint(r.rs.synced.Load()))
	}
}
