#!/usr/bin/env bash
# The house points one way (docs/architecture.md, "The house"): internal/
# never imports a component, the read side (queryapi) never imports the
# write side (collector, materializer), the components never import the
# store or the composition root. Checked on every package's
# dependencies, tests included, so a violation fails CI rather than review.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/fleetview/fleetview
fail=0
# check PACKAGE-PATTERN FORBIDDEN-REGEX
check() {
	local pkgs=$1 forbidden=$2 p bad
	for p in $(go list "$pkgs"); do
		bad=$(go list -deps -test -f '{{.ImportPath}}' "$p" | grep -E "^$mod/($forbidden)(/|$)" | grep -v "^$p\$" | grep -v "^$p\.test\$" || true)
		if [ -n "$bad" ]; then
			echo "FAIL: $p depends on:"; echo "$bad" | sed 's/^/    /'
			fail=1
		fi
	done
}
check "./internal/..." "collector|materializer|queryapi|store|cmd"
check "./queryapi/..." "collector|materializer|store|cmd"
check "./collector/..." "materializer|queryapi|store|cmd"
check "./materializer/..." "collector|queryapi|store|cmd"
check "./store/..." "collector|queryapi|cmd"
# The kubectl plugin is a client of the hub's REST API: no component, no
# server wiring.
check "./cmd/kubectl-fleet/..." "collector|materializer|queryapi|store|cmd/fleetview"
# The set never names a concrete store: each registers through store.Kind
# from the composition root (its tests may use one).
bad=$(go list -deps -f '{{.ImportPath}}' ./store | grep -E "^$mod/store/" || true)
if [ -n "$bad" ]; then
	echo "FAIL: $mod/store depends on:"; echo "$bad" | sed 's/^/    /'
	fail=1
fi
# The query API's root composes its parts; no part imports the root
# (tests included).
for p in $(go list ./queryapi/... | grep -v "^$mod/queryapi\$"); do
	if go list -deps -test -f '{{.ImportPath}}' "$p" | grep -qx "$mod/queryapi"; then
		echo "FAIL: $p depends on $mod/queryapi"
		fail=1
	fi
done
# Test support (internal/testing, integration) never ships: the binary's
# own dependencies, tests excluded, hold none of it.
bad=$(go list -deps -f '{{.ImportPath}}' ./cmd/... | grep -E "^$mod/(internal/testing|integration)(/|$)" || true)
if [ -n "$bad" ]; then
	echo "FAIL: the fleetview binary depends on test support:"; echo "$bad" | sed 's/^/    /'
	fail=1
fi
[ "$fail" = 0 ] && echo "layers: ok"
exit "$fail"
