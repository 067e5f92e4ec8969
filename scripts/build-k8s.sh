#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy (no download sites are
# reachable here; see docs/running-kube-apiserver.md) and caches them outside the
# repository, keyed by version. Prints the directory holding the binaries.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.0}
CACHE=${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}
OUT="$CACHE/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION"
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/etcd" ]; then echo "$OUT"; exit 0; fi
MOD="$CACHE/k8s-build-mod"
mkdir -p "$MOD" "$OUT"
cd "$MOD"
minor=${K8S_VERSION#*.}; minor=${minor%%.*}
cat > go.mod <<GOMOD
module fleetview.local/k8sbins

go 1.26

require (
	k8s.io/kubernetes v$K8S_VERSION
	go.etcd.io/etcd/server/v3 v$ETCD_VERSION
)
GOMOD
cat > tools.go <<'GO'
//go:build tools

package k8sbins

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
GO
# k8s.io/kubernetes points its staging modules at local paths; pin each to the
# published v0.<minor>.<patch> release instead.
go mod download "k8s.io/kubernetes@v$K8S_VERSION" # no -json: its errors would go to stdout, which was discarded
kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION/go.mod
staging=$(grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$kmod" | awk '{print $1}' | sort -u)
for m in $staging; do
	echo "replace $m => $m v0.${K8S_VERSION#*.}" >> go.mod
done
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
ld="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
go build -ldflags "$ld" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
go build -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
mv "$OUT/etcd.tmp" "$OUT/etcd"
echo "$OUT"
