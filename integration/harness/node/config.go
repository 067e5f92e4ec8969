package node

import "fmt"

// The node's fixed addresses: a private bridge with the node's address as
// the pods' gateway, and a Service range beside it.
const (
	Bridge      = "fvnode0"
	NodeIP      = "10.123.0.1"
	PodCIDR     = "10.123.0.0/24"
	ServiceCIDR = "10.124.0.0/24"
	// NodeName is the kubelet's --hostname-override.
	NodeName = "fvnode"
	// CgroupRoot is the kubelet's cgroup root (cgroupfs): every pod's cgroup
	// is under it, so Stop finds what is left.
	CgroupRoot = "/fleetview-node"
	// PauseImage is the sandbox image, built from ./pause.
	PauseImage = "fleetview.local/pause:3.10"
)

func containerdConfig(n *Node) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # The machine lacks CAP_SYS_RESOURCE: a container's oom_score_adj may not
  # go below containerd's own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  # Pods' network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.containerdSock(), n.path("containerd", "opt"), PauseImage, n.path("cni", "net.d"))
}

// cniConfig: no masquerading (pods talk to the node and each other only), so
// the bridge plugin adds no iptables rules; IPAM state in the work dir.
func cniConfig(n *Node) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "fvnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, Bridge, n.path("cni", "ipam"), PodCIDR, NodeIP)
}

func kubeletConfig(n *Node, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
containerRuntimeEndpoint: unix://%[2]s
address: %[5]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
clusterDNS: [%[5]q]
clusterDomain: cluster.local
resolvConf: %[6]q
podLogsDir: %[7]q
volumePluginDir: %[8]q
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
maxPods: 30
registerNode: true
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`, CgroupRoot, n.containerdSock(), n.kubeletPort, healthzPort, NodeIP, n.path("resolv.conf"), n.path("pod-logs"), n.path("kubelet", "volume-plugins"))
}

func kubeProxyConfig(n *Node, healthz, metrics string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %[1]s
clusterCIDR: %[2]s
clientConnection:
  kubeconfig: %[3]q
healthzBindAddress: %[4]s
metricsBindAddress: %[5]s
nodePortAddresses: ["%[6]s/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
nftables:
  # Pod -> Service -> pod on one bridge: masqueraded, the reply comes back
  # through the node and is un-NATed there.
  masqueradeAll: true
`, NodeName, PodCIDR, n.kubeconfig, healthz, metrics, NodeIP)
}

func corefile(n *Node, health, ready string) string {
	// No bind plugin in the build: CoreDNS listens on every address's port
	// 53, which pods reach at NodeIP.
	return fmt.Sprintf(`.:53 {
    errors
    health %s
    ready %s
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`, health, ready, n.kubeconfig)
}
