package materializer

import (
	"fmt"
	"io"
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

// WritePrometheus writes the counters in the Prometheus text format, labelled
// with the materializer's name, so an HTTP /metrics handler can serve several
// materializers.
func (m *Materializer) WritePrometheus(w io.Writer) error {
	for _, c := range []struct {
		name, help string
		v          uint64
	}{
		{"fleetview_materializer_events_applied_total", "Events committed to the backend.", m.metrics.Applied.Load()},
		{"fleetview_materializer_batches_total", "Batches committed to the backend.", m.metrics.Batches.Load()},
		{"fleetview_materializer_events_skipped_total", "Object events routed to another backend.", m.metrics.Skipped.Load()},
		{"fleetview_materializer_dead_letters_total", "Poison events moved to the dead-letter stream FV_DEAD.", m.metrics.DeadLettered.Load()},
	} {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s{materializer=%q} %d\n", c.name, c.help, c.name, c.name, m.cfg.Name, c.v); err != nil {
			return err
		}
	}
	return nil
}
