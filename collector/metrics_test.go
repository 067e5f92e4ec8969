package collector

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// up runs several collectors in one process: their metrics register side
// by side on one registry, told apart by the cluster label.
func TestPrometheusCollectorsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i, cl := range []string{"m1", "m2"} {
		c := &Collector{cfg: Config{Cluster: cl}, running: map[schema.GroupVersionResource]*runningSync{}, m: &metrics{}}
		c.m.upserts.Add(int64(10 * (i + 1)))
		c.m.publishErrors.Add(int64(i))
		if err := reg.Register(c.PrometheusCollector()); err != nil {
			t.Fatalf("register %s: %v", cl, err)
		}
	}
	want := `
# HELP fleetview_collector_upserts_total Object versions published.
# TYPE fleetview_collector_upserts_total counter
fleetview_collector_upserts_total{cluster="m1"} 10
fleetview_collector_upserts_total{cluster="m2"} 20
# HELP fleetview_collector_publish_errors_total Publishes that failed or were not acknowledged (a list's leads to a relist, a watch's to a resume from its last acknowledged resourceVersion).
# TYPE fleetview_collector_publish_errors_total counter
fleetview_collector_publish_errors_total{cluster="m1"} 0
fleetview_collector_publish_errors_total{cluster="m2"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fleetview_collector_upserts_total", "fleetview_collector_publish_errors_total"); err != nil {
		t.Fatal(err)
	}
	// The same cluster twice is a mistake the registry refuses.
	dup := &Collector{cfg: Config{Cluster: "m1"}, running: map[schema.GroupVersionResource]*runningSync{}, m: &metrics{}}
	if err := reg.Register(dup.PrometheusCollector()); err == nil {
		t.Error("a second collector of cluster m1 registered")
	}
}
