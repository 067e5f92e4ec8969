package app

import (
	"fmt"
	"net"
)

// metricsAllowRemoteHelp is the help of --metrics-allow-remote, shared by
// every subcommand with a metrics endpoint.
const metricsAllowRemoteHelp = "let --metrics-addr listen beyond loopback. The endpoint has no authentication: anyone reaching it reads the metrics and, " +
	"at /debug/pprof/, takes CPU and heap profiles, execution traces and goroutine dumps (names of what is cached, the command line). " +
	"Only behind a network policy or an authenticating proxy"

// metricsAddrHelp is the help of --metrics-addr.
const metricsAddrHelp = "serve Prometheus-format metrics at http://ADDR/metrics and Go profiles at /debug/pprof/, unauthenticated; " +
	"a loopback address (127.0.0.1:9090, localhost:9090, [::1]:9090) unless --metrics-allow-remote; empty = off"

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
