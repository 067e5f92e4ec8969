// Package debugserver owns the operator's local HTTP endpoint of a
// fleetview process: Prometheus-format metrics at /metrics and Go profiles
// at /debug/pprof/. Memory and CPU of a collector tracking a large cluster,
// or of serve holding millions of objects, are what to look at first when
// one misbehaves, so both live on the same operator-chosen address. Neither
// is authenticated: the commands refuse a non-loopback address unless the
// operator allows it (--metrics-allow-remote, cmd/fleetview/app/metrics.go),
// and profiles can be left out (--metrics-pprof=false) when the endpoint is
// exposed for a Prometheus scrape.
package debugserver
