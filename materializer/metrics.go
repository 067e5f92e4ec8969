package materializer

import (
	"fmt"
	"io"
	"sort"
	"sync/atomic"
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
}

// WritePrometheus writes the counters of materializers in the Prometheus
// text format, labelled with each materializer's name, plus the applied
// stream sequence per cluster.
func WritePrometheus(w io.Writer, ms ...*Materializer) error {
	for _, c := range []struct {
		name, help string
		v          func(*Metrics) uint64
	}{
		{"fleetview_materializer_events_applied_total", "Events committed to the backend.", func(m *Metrics) uint64 { return m.Applied.Load() }},
		{"fleetview_materializer_batches_total", "Batches committed to the backend.", func(m *Metrics) uint64 { return m.Batches.Load() }},
		{"fleetview_materializer_events_skipped_total", "Object events routed to another backend.", func(m *Metrics) uint64 { return m.Skipped.Load() }},
		{"fleetview_materializer_dead_letters_total", "Poison events moved to the dead-letter stream FV_DEAD.", func(m *Metrics) uint64 { return m.DeadLettered.Load() }},
	} {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name); err != nil {
			return err
		}
		for _, m := range ms {
			if _, err := fmt.Fprintf(w, "%s{materializer=%q} %d\n", c.name, m.cfg.Name, c.v(&m.metrics)); err != nil {
				return err
			}
		}
	}
	const seq = "fleetview_materializer_applied_sequence"
	if _, err := fmt.Fprintf(w, "# HELP %s Last stream sequence applied, per cluster stream.\n# TYPE %s gauge\n", seq, seq); err != nil {
		return err
	}
	for _, m := range ms {
		applied := m.Applied()
		clusters := make([]string, 0, len(applied))
		for c := range applied {
			clusters = append(clusters, c)
		}
		sort.Strings(clusters)
		for _, c := range clusters {
			if _, err := fmt.Fprintf(w, "%s{materializer=%q,cluster=%q} %d\n", seq, m.cfg.Name, c, applied[c]); err != nil {
				return err
			}
		}
	}
	return nil
}
