// Package podjson writes the JSON of realistic Kubernetes Pods (about 3 KB
// each, shaped as the collector publishes them) for tests and benchmarks.
// It imports nothing of fleetview, so the packages below the stream
// contract (internal/rawjson) can test on the same Pods as everything
// else; internal/testing/benchdata wraps them into events and streams.
// It must not be used by production code.
package podjson
