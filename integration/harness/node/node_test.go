//go:build realnode

package node

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(b, "\n")))
	return len(b), nil
}

// TestNodeRunsAPodAndLeavesNothing starts the node, runs a pod on the
// bridge (the sandbox image is the harness's own pause image), and checks
// that Stop leaves the host as it was: Stop compares processes, mounts,
// nftables, interfaces, cgroups, sysctls and the kubelet's files with what
// Start recorded, and the bridge and kube-proxy's table are checked here too.
func TestNodeRunsAPodAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	n, err := Start(ctx, Options{LogWriter: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop()
		}
	})
	t.Logf("node ready in %s", time.Since(began).Round(time.Second))
	cs := n.Clientset()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, podNet, _ := net.ParseCIDR(PodCIDR)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			if ip := net.ParseIP(p.Status.PodIP); ip == nil || !podNet.Contains(ip) {
				t.Fatalf("pod IP %q is not in %s", p.Status.PodIP, PodCIDR)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not running after 2 minutes: %v %v", p.Status, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput(); err != nil {
		t.Fatalf("kube-proxy's nftables table is missing while the node runs: %v %s", err, out)
	}

	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.InterfaceByName(Bridge); err == nil {
		t.Errorf("bridge %s left", Bridge)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput(); err == nil {
		t.Errorf("kube-proxy's table left: %s", out)
	}
	t.Logf("node test with its start and stop: %s", time.Since(began).Round(time.Second))
}
