#!/usr/bin/env bash
# Builds what a real single-node cluster needs beside kube-apiserver and etcd
# (scripts/build-k8s.sh): kubelet, kube-scheduler, kube-controller-manager,
# kube-proxy and a CoreDNS with only the plugins a test cluster uses, all from
# the Go module proxy, cached outside the repository keyed by version. Prints
# the directory holding the binaries. The node harness
# (integration/harness/node) runs them; containerd, runc and the CNI plugins
# are Debian's.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.37.2}
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
CACHE=${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}
OUT="$CACHE/node-k8s-v$K8S_VERSION-coredns-v$COREDNS_VERSION"
bins=(kubelet kube-scheduler kube-controller-manager kube-proxy coredns)
have=1
for b in "${bins[@]}"; do [ -x "$OUT/$b" ] || have=0; done
if [ "$have" = 1 ]; then echo "$OUT"; exit 0; fi
# Its own module directory: build-k8s.sh may be tidying its own at the same time.
# The same build flags as build-k8s.sh, so the packages both builds share are
# compiled once (Go's build cache).
MOD="$CACHE/node-build-mod"
mkdir -p "$MOD/coredns" "$OUT"
cd "$MOD"
minor=${K8S_VERSION#*.}; minor=${minor%%.*}
cat > go.mod <<GOMOD
module fleetview.local/nodebins

go 1.26

require (
	k8s.io/kubernetes v$K8S_VERSION
	github.com/coredns/coredns v$COREDNS_VERSION
)
GOMOD
cat > tools.go <<'GO'
//go:build tools

package nodebins

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
# CoreDNS's own main imports every plugin (cloud DNS SDKs included); this one
# registers only what the cluster's Corefile uses.
cat > coredns/main.go <<'GO'
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
GO
go mod download "k8s.io/kubernetes@v$K8S_VERSION"
kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION/go.mod
staging=$(grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$kmod" | awk '{print $1}' | sort -u)
for m in $staging; do
	echo "replace $m => $m v0.${K8S_VERSION#*.}" >> go.mod
done
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
ld="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for c in kubelet kube-scheduler kube-controller-manager kube-proxy; do
	go build -ldflags "$ld" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c"
done
go build -o "$OUT/coredns.tmp" ./coredns
for b in "${bins[@]}"; do mv "$OUT/$b.tmp" "$OUT/$b"; done
echo "$OUT"
