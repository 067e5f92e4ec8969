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
. "$(dirname "$0")/k8s-module.sh"
k8s_module
mkdir -p "$OUT"
cd "$K8S_MOD"
go build -ldflags "$K8S_LDFLAGS" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
go build -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
mv "$OUT/etcd.tmp" "$OUT/etcd"
echo "$OUT"
