#!/usr/bin/env bash
# Materializer benchmark: raw JetStream publish rate, Badger apply rate and
# peak RSS (fleetview serve), replay rate (fleetview rebuild) and OpenSearch
# bulk apply rate, for the same ~3 KB Pod events in one run. Results go in
# docs/benchmarks/materializer.md.
#
# Scale (defaults: the issue's): FV_BENCH_EVENTS=1000000 FV_BENCH_CLUSTERS=1
# FV_BENCH_OPENSEARCH_EVENTS=$FV_BENCH_EVENTS FV_BENCH_OPENSEARCH_HEAP_MB=1024
# FV_BENCH_OPENSEARCH_BATCH=2000; see integration/cmd/bench-materializer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./integration/cmd/bench-materializer "$@"
