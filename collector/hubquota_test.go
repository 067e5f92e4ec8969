package collector

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// TestHubQuotaRefusals: the hub's quota refusals, as the collector's
// JetStream client reports them, are counted and land in the inventory
// record; other errors are not.
func TestHubQuotaRefusals(t *testing.T) {
	quota := &jetstream.APIError{Code: 403, Description: natsnames.ErrHubQuota.Error() + ": cluster m1 holds 8 consumers on KV_fv_registries (at most 8)"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"other API error", &jetstream.APIError{Code: 403, Description: "refused to a member cluster's collector: push consumers"}, false},
		{"stream byte quota", &jetstream.APIError{Code: 503, Description: "maximum bytes exceeded"}, false},
		{"hub quota", quota, true},
		{"hub quota wrapped", fmt.Errorf("read fv_registries bucket: %w", quota), true},
		{"hub quota joined", errors.Join(errors.New("x"), fmt.Errorf("status: %w", quota)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Collector{cfg: Config{Cluster: "m1"}, m: &metrics{}}
			if got := c.m.hubRefused(tc.err); got != tc.want {
				t.Fatalf("hubRefused = %v", got)
			}
			rec := c.record(true, "")
			if !tc.want {
				if rec.HubRefusals != nil {
					t.Fatalf("record shows refusals %+v", rec.HubRefusals)
				}
				return
			}
			if !errors.Is(natsnames.HubQuotaError(tc.err), natsnames.ErrHubQuota) {
				t.Fatal("not ErrHubQuota")
			}
			if rec.HubRefusals == nil || rec.HubRefusals.Count != 1 || !strings.Contains(rec.HubRefusals.Last, "8 consumers on KV_fv_registries") {
				t.Fatalf("record's refusals %+v", rec.HubRefusals)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(c.PrometheusCollector())
			want := "# HELP fleetview_collector_hub_quota_refused_total " + hubQuotaHelp + "\n# TYPE fleetview_collector_hub_quota_refused_total counter\nfleetview_collector_hub_quota_refused_total{cluster=\"m1\"} 1\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fleetview_collector_hub_quota_refused_total"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
