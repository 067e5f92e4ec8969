package collector

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/fleetview/fleetview/internal/inventory"
)

// metrics are the collector's counters. They are plain atomics rather than
// a metrics library: the inventory record carries them (so `fleetview`
// clients see them) and MetricsHandler serves them in the Prometheus text
// format.
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

// MetricsHandler serves the counters and per-resource object counts in the
// Prometheus text exposition format.
func (c *Collector) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s := c.m.snapshot()
		cl := c.cfg.Cluster
		counter(w, "fleetview_collector_upserts_total", "Object versions published.", cl, s.Upserts)
		counter(w, "fleetview_collector_tombstones_total", "Tombstones published.", cl, s.Tombstones)
		counter(w, "fleetview_collector_unchanged_total", "Listed objects not republished because the stream already held their version.", cl, s.Unchanged)
		counter(w, "fleetview_collector_refused_objects_total", "Objects refused because they exceed the NATS max payload.", cl, s.Refused)
		counter(w, "fleetview_collector_publish_errors_total", "Publishes that failed or were not acknowledged (each leads to a relist).", cl, s.PublishErrors)
		counter(w, "fleetview_collector_quota_refused_total", "Publishes refused because the cluster's stream reached its byte quota (--stream-max-bytes).", cl, c.m.quotaRefused.Load())
		counter(w, "fleetview_collector_relists_total", "Relists (after a watch could not resume, a lost publish or an error).", cl, s.Relists)
		fmt.Fprintln(w, "# HELP fleetview_collector_objects Objects currently tracked per resource.")
		fmt.Fprintln(w, "# TYPE fleetview_collector_objects gauge")
		c.mu.Lock()
		for gvr, r := range c.running {
			fmt.Fprintf(w, "fleetview_collector_objects{cluster=%q,group=%q,version=%q,resource=%q,synced=%q} %d\n",
				cl, gvr.Group, gvr.Version, gvr.Resource, fmt.Sprint(r.rs.synced.Load()), r.rs.count.Load())
		}
		c.mu.Unlock()
	})
}

func counter(w io.Writer, name, help, cluster string, v int64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s{cluster=%q} %d\n", name, help, name, name, cluster, v)
}
