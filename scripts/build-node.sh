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
. "$(dirname "$0")/k8s-module.sh"
k8s_module
mkdir -p "$OUT"
# The node's Kubernetes binaries in build-k8s.sh's module (k8s-module.sh says
# why), in one go build: its links run side by side.
(cd "$K8S_MOD" && go build -ldflags "$K8S_LDFLAGS" -o "$OUT/tmp/" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-proxy)
# CoreDNS in a module of its own.
MOD="$CACHE/node-build-mod"
mkdir -p "$MOD/coredns"
cd "$MOD"
rm -f tools.go # the Kubernetes commands it held before they moved
cat > go.mod <<GOMOD
module fleetview.local/nodebins

go 1.26

require github.com/coredns/coredns v$COREDNS_VERSION
GOMOD
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
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
go build -o "$OUT/tmp/coredns" ./coredns
for b in "${bins[@]}"; do mv "$OUT/tmp/$b" "$OUT/$b"; done
rmdir "$OUT/tmp"
echo "$OUT"
