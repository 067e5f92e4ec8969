// Package integration holds fleetview's end-to-end tests and benchmarks:
// real kube-apiservers and etcd (harness), real NATS JetStream servers
// (embedded, or clustered), real OpenSearch nodes (integration/opensearch),
// Debian's headless chromium for the console, helm for the chart, and
// fleetview itself, in-process exactly as `fleetview up` runs it or as
// built binaries run as separate processes (kill -9 tests, replicas,
// remote collectors). Nothing here is faked; a missing component fails the
// tests loudly. integration/cmd holds the benchmark, baseline and demo
// programs.
package integration
