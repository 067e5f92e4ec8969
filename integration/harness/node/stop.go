package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Stop deletes every pod, stops the components, containerd and the control
// plane, and puts the host back as Start found it; it returns ErrHostChanged
// naming what still differs. Safe to call more than once.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var errs []error
	began := time.Now()
	// Nothing may recreate pods while they go.
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		if p := n.proc(name); p != nil {
			p.stop(10 * time.Second)
		}
	}
	if kl := n.proc("kubelet"); kl != nil && !kl.exited() && n.Cluster != nil && n.containerd != nil && !n.containerd.exited() {
		if err := n.deletePods(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range []string{"kubelet", "kube-proxy", "coredns"} {
		if p := n.proc(name); p != nil {
			p.stop(10 * time.Second)
		}
	}
	// Containers the kubelet did not stop, then their shims (which outlive
	// containerd by design).
	errs = append(errs, removeCgroups(CgroupRoot)...)
	if n.containerd != nil {
		n.containerd.stop(15 * time.Second)
	}
	if n.Fleet != nil {
		if err := n.Fleet.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.WorkDir != "" {
		for _, p := range processesMentioning(n.WorkDir) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if n.spawner != nil {
		n.spawner.close()
	}
	if n.host != nil {
		// Killed processes take a moment to leave /proc.
		deadline := time.Now().Add(10 * time.Second)
		for n.WorkDir != "" && len(processesMentioning(n.WorkDir)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // no event for "a process is reaped" that is not ours
		}
		if err := n.host.restore(n.WorkDir, CgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	n.logf("node stopped and host restored in %s", time.Since(began).Round(time.Millisecond))
	return errors.Join(errs...)
}

// deletePods deletes every pod (no grace: the node is going away) and waits
// until containerd runs no container, so the kubelet tears their sandboxes'
// networks down through CNI.
func (n *Node) deletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs := n.Clientset()
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("node: stop: listing namespaces: %w", err)
	}
	zero := int64(0)
	for _, ns := range nss.Items {
		if err := cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("node: stop: deleting pods of %s: %w", ns.Name, err)
		}
	}
	for {
		out, err := n.ctr(ctx, "tasks", "ls", "-q")
		if err == nil && strings.TrimSpace(out) == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: stop: containers still running after the pods were deleted: %s %v", strings.TrimSpace(out), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Sweep removes what a killed test's node left behind: its processes,
// cgroups, mounts, bridge, kube-proxy's tables and work directories. It
// cannot know the sysctls the node found (Stop restores those).
func Sweep() error {
	var errs []error
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "fleetview-node-*"))
	for _, d := range dirs {
		for _, p := range processesMentioning(d) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	errs = append(errs, removeCgroups(CgroupRoot)...)
	ms, _ := mountPoints()
	for i := len(ms) - 1; i >= 0; i-- {
		if strings.Contains(ms[i], "/fleetview-node-") {
			_ = syscall.Unmount(ms[i], syscall.MNT_DETACH)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if _, err := run("ip", "link", "delete", Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range []string{"ip kube-proxy", "ip6 kube-proxy"} {
		_, _ = run("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...)
	}
	for _, d := range dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
}
