// Package benchdata makes realistic Kubernetes Pod events (about 3 KB of
// pruned JSON each, as the collector publishes them) for tests and
// benchmarks, and publishes them into a cluster stream.
// It must not be used by production code.
package benchdata
