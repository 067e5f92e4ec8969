# Sourced by scripts/build-k8s.sh and scripts/build-node.sh: the one
# throw-away Go module both build the Kubernetes binaries in.
#
# One module, so one build list: kube-apiserver and the node's kubelet,
# kube-scheduler, kube-controller-manager and kube-proxy then compile
# against the same versions of everything they share, and Go's build cache
# compiles those packages once. Two modules (etcd in one, CoreDNS in the
# other) had selected different versions of grpc, x/net, otel and
# prometheus, so on a cold machine the node's build recompiled nearly all
# of what kube-apiserver's had just compiled. CoreDNS stays in a module of
# its own (build-node.sh): it would raise those versions here.
#
# k8s.io/kubernetes points its staging modules at local paths; each is
# pinned to the published v0.<minor>.<patch> release instead.
K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.0}
CACHE=${FLEETVIEW_CACHE:-$HOME/.cache/fleetview}
K8S_MOD="$CACHE/k8s-build-mod"
k8s_minor=${K8S_VERSION#*.}; k8s_minor=${k8s_minor%%.*}
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"

# k8s_module writes and tidies the module once per version pair (a stamp
# file says it is done), under a lock: the integration harnesses may run
# both build scripts at once.
k8s_module() {
	local stamp="$K8S_MOD/.ready-k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION-node"
	[ -f "$stamp" ] && return 0
	mkdir -p "$K8S_MOD"
	(
		flock 9
		[ -f "$stamp" ] && exit 0
		cd "$K8S_MOD"
		rm -f .ready-*
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
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
		go mod download "k8s.io/kubernetes@v$K8S_VERSION" # no -json: its errors would go to stdout, which was discarded
		local kmod staging m
		kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION/go.mod
		staging=$(grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$kmod" | awk '{print $1}' | sort -u)
		for m in $staging; do
			echo "replace $m => $m v0.${K8S_VERSION#*.}" >> go.mod
		done
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
		touch "$stamp"
	) 9>"$CACHE/.k8s-module.lock"
}
