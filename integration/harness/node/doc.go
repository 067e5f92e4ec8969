// Package node starts a real single-node Kubernetes cluster for tests: the
// member-cluster harness's etcd and kube-apiserver (with ServiceAccount
// admission and the apiserver advertised on a private bridge), plus
// kube-scheduler, kube-controller-manager, a kubelet, kube-proxy (nftables
// mode) and CoreDNS, all built from the Go module proxy by
// scripts/build-node.sh and cached like kube-apiserver, and Debian's
// containerd, runc and CNI plugins. No registry is reachable, so images are
// built without an engine (deploy/image) and imported into containerd
// (Node.ImportImage); the pod sandbox image is built from ./pause.
//
// The node owns one bridge (Bridge, PodCIDR; the gateway is the node's
// address), a work directory holding every state directory (containerd's
// root and state, the kubelet's root, CNI's IPAM state, pod logs), a cgroup
// root of its own, and kube-proxy's nftables tables. Start records the
// host's state first (processes are its own children; mounts, nftables
// tables, network interfaces, cgroups, the sysctls the kubelet, kube-proxy
// and forwarding change, and the files the kubelet writes outside its root)
// and Stop puts it back: it deletes every pod, stops the processes, kills
// containers that outlived their shims, unmounts, deletes the bridge and
// kube-proxy's tables, restores the sysctls, and returns an error naming
// whatever still differs from the recorded state.
//
// It needs root (a test machine), and refuses to start when the bridge
// already exists (another node, or the leftovers of a killed test: Sweep
// removes those).
package node
