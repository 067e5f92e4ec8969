package benchutil

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricFamilies reads and parses a process's /metrics page (metrics:
// http://host:port).
func MetricFamilies(ctx context.Context, metrics string) (map[string]*dto.MetricFamily, error) {
	code, body, err := Get(ctx, metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %d", metrics, code)
	}
	fams, err := ParseMetrics(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", metrics, err)
	}
	return fams, nil
}

// ParseMetrics parses a Prometheus text page.
func ParseMetrics(body []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

// SingleGauges are the gauges of fams that have one series, by name
// (go_goroutines, go_memstats_*: the process's own).
func SingleGauges(fams map[string]*dto.MetricFamily) map[string]float64 {
	g := map[string]float64{}
	for name, f := range fams {
		if ms := f.GetMetric(); len(ms) == 1 && ms[0].GetGauge() != nil {
			g[name] = ms[0].GetGauge().GetValue()
		}
	}
	return g
}
