package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestCollectorFlagsValidate(t *testing.T) {
	cases := []struct {
		name string
		set  func(*CollectorOptions)
		want string
	}{
		{"cluster info not namespace/name", func(o *CollectorOptions) { o.ClusterInfoConfigMap = "just-a-name" }, "--cluster-info-configmap"},
		{"cluster info bad namespace", func(o *CollectorOptions) { o.ClusterInfoConfigMap = "Kube_System/x" }, "--cluster-info-configmap"},
		{"recheck", func(o *CollectorOptions) { o.APIRecheck = 0 }, "--api-recheck-interval"},
		{"discovery", func(o *CollectorOptions) { o.DiscoveryInterval = 0 }, "--discovery-interval"},
		{"page size", func(o *CollectorOptions) { o.PageSize = -1 }, "--page-size"},
		{"reconnect buffer", func(o *CollectorOptions) { o.ReconnectBuffer = 0 }, "--nats-reconnect-buffer"},
		{"gc percent", func(o *CollectorOptions) { o.GCPercent = 0 }, "--gc-percent"},
		{"metrics address", func(o *CollectorOptions) { o.MetricsAddr = "nope" }, "--metrics-addr"},
		{"metrics beyond loopback", func(o *CollectorOptions) { o.MetricsAddr = "0.0.0.0:9090" }, "--metrics-addr 0.0.0.0:9090 is not a loopback address"},
		{"metrics on every interface", func(o *CollectorOptions) { o.MetricsAddr = ":9090" }, "--metrics-allow-remote"},
		{"metrics on loopback", func(o *CollectorOptions) { o.MetricsAddr = "127.0.0.1:9090" }, ""},
		{"metrics beyond loopback, allowed", func(o *CollectorOptions) { o.MetricsAddr, o.MetricsAllowRemote = "0.0.0.0:9090", true }, ""},
		{"act-through class unknown", func(o *CollectorOptions) { o.ActThrough = "writes,exec" }, "--act-through"},
		{"act-through classes", func(o *CollectorOptions) { o.ActThrough = "writes,logs,reads" }, ""},
		{"defaults are valid", func(*CollectorOptions) {}, ""},
		{"cluster info off", func(o *CollectorOptions) { o.ClusterInfoConfigMap = "" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o CollectorOptions
			o.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
			o.Cluster = "member1"
			tc.set(&o)
			errs := o.Validate()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || !errors.Is(errs[0], ErrInvalidOptions) {
				t.Fatalf("errors %v, want one naming %s", errs, tc.want)
			}
		})
	}
}
