// Package bench holds BenchmarkCollectorInitialSync: 100k Pods from a real
// kube-apiserver through the collector binary beside its baselines
// (collector_bench_test.go), then through the whole pipeline into one hub
// and into a three-member cluster (scaleout_bench_test.go). scripts/test.sh
// runs it; BENCHMARKS.md has the command. It holds no test: `go test
// ./...` builds it and runs nothing.
package bench
