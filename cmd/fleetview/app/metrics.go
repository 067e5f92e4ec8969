package app

import (
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/debugserver"
)

// metricsAllowRemoteHelp is the help of --metrics-allow-remote, shared by
// every subcommand with a metrics endpoint.
const metricsAllowRemoteHelp = "let --metrics-addr listen beyond loopback. The endpoint has no authentication: anyone reaching it reads the metrics (cluster names, " +
	"how many objects and watches, request rates) and, unless --metrics-pprof=false, at /debug/pprof/, takes CPU and heap profiles, execution traces and goroutine dumps (names of what is cached, the command line). " +
	"Only behind a network policy or an authenticating proxy"

// metricsAddrHelp is the help of --metrics-addr.
const metricsAddrHelp = "serve Prometheus-format metrics at http://ADDR/metrics and Go profiles at /debug/pprof/ (unless --metrics-pprof=false), unauthenticated; " +
	"a loopback address (127.0.0.1:9090, localhost:9090, [::1]:9090) unless --metrics-allow-remote; empty = off"

// MetricsOptions say where a process serves its metrics (and profiles).
type MetricsOptions struct {
	// MetricsAddr serves metrics and Go profiles, unauthenticated:
	// loopback only unless MetricsAllowRemote.
	MetricsAddr        string
	MetricsAllowRemote bool
	// MetricsPprof serves Go profiles next to the metrics; turned off
	// when the endpoint is exposed for scraping (the chart's
	// ServiceMonitor), since profiles reveal and cost more than metrics.
	MetricsPprof bool
}

// AddFlags registers the flags.
func (o *MetricsOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", metricsAddrHelp)
	fs.BoolVar(&o.MetricsAllowRemote, "metrics-allow-remote", false, metricsAllowRemoteHelp)
	fs.BoolVar(&o.MetricsPprof, "metrics-pprof", true, "serve Go profiles at /debug/pprof/ on --metrics-addr (turn off when the endpoint is reachable beyond loopback, e.g. for a ServiceMonitor)")
}

// Validate checks the address.
func (o MetricsOptions) Validate() []error {
	return validateMetricsAddr(o.MetricsAddr, o.MetricsAllowRemote)
}

// newMetricsRegistry is a process's own registry (never the global
// default one): the Go runtime and process collectors, plus whatever the
// components register.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// startMetrics serves reg (and profiles, if asked) on the options'
// address; nil when metrics are off.
// do carries the endpoint's bounds (zero: debugserver's defaults).
func (o MetricsOptions) startMetrics(reg *prometheus.Registry, do debugserver.Options) (*debugserver.Server, error) {
	if o.MetricsAddr == "" {
		return nil, nil
	}
	// ContinueOnError: one failing collector must not blank the scrape.
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
	do.Pprof = o.MetricsPprof
	return debugserver.Start(o.MetricsAddr, h, do)
}

// validateMetricsAddr checks --metrics-addr: the debug endpoint has no
// authentication, so it stays on loopback unless the operator says
// otherwise. ":9090" listens on every interface and is refused too.
func validateMetricsAddr(addr string, allowRemote bool) []error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return []error{fmt.Errorf("%w: --metrics-addr %q: %v", ErrInvalidOptions, addr, err)}
	}
	if !allowRemote && !isLoopback(addr) {
		return []error{fmt.Errorf("%w: --metrics-addr %s is not a loopback address: /metrics and /debug/pprof/ have no authentication, so anyone reaching it could take profiles and goroutine dumps (use 127.0.0.1:PORT, or set --metrics-allow-remote)", ErrInvalidOptions, addr)}
	}
	return nil
}
