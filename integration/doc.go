// Package integration holds fleetview's end-to-end tests and benchmarks,
// one Go package per area: ingest (collector, materializer, per-cluster
// NATS credentials), query (query API, Kubernetes API, authorization,
// console, limits, metrics, versions), backends (routing between Badger
// and OpenSearch, OpenSearch restarts and clusters, serve replicas, NATS
// clusters), deploy (helm chart, CLI, hub topology, `fleetview up` end to
// end) and bench (the collector benchmark). They share integration/fixture.
// They run real kube-apiservers and etcd (harness), real NATS JetStream
// servers (embedded, or clustered), real OpenSearch nodes
// (integration/opensearch), Debian's headless chromium for the console,
// helm for the chart, and fleetview itself, in-process exactly as
// `fleetview up` runs it or as built binaries run as separate processes
// (kill -9 tests, replicas, remote collectors). Nothing here is faked; a
// missing component fails the tests loudly. integration/cmd holds the
// benchmark, baseline and demo programs. README.md maps each property the
// product promises to the test that shows it.
package integration
