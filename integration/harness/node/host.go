package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// sysctlDirs are the /proc/sys trees whose writable values are recorded and
// put back: the kubelet sets vm.* and kernel.* panic/overcommit values,
// kube-proxy conntrack and route_localnet ones, and the node turns on
// forwarding. Per-interface settings come and go with the interfaces and
// are not compared, except all/default.
var sysctlDirs = []string{"vm", "kernel", "net/ipv4", "net/ipv6/conf/all", "net/ipv6/conf/default", "net/bridge", "net/netfilter", "net/core"}

// volatileSysctls change by themselves.
var volatileSysctls = []string{"kernel/ns_last_pid", "kernel/random/", "net/netfilter/nf_conntrack_count", "kernel/hung_task", "vm/drop_caches", "vm/compact_memory", "kernel/sysrq"}

// watchedPaths are outside the work directory and written by the kubelet,
// containerd or CNI no matter where their own roots are.
var watchedPaths = []string{"/var/log/containers", "/var/log/pods", "/var/lib/cni", "/var/run/netns", "/run/netns", "/etc/cni", "/opt/cni", "/var/lib/kubelet", "/run/containerd", "/var/lib/containerd", "/usr/libexec/kubernetes"}

// hostState is what Start records and Stop restores and compares.
type hostState struct {
	sysctls map[string]string
	mounts  []string
	nft     string
	tables  []string
	links   []string
	cgroups []string
	paths   map[string]bool
}

func recordHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, paths: map[string]bool{}}
	for _, d := range sysctlDirs {
		root := filepath.Join("/proc/sys", d)
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil //nolint:nilerr // unreadable trees are not ours to compare
			}
			rel := strings.TrimPrefix(p, "/proc/sys/")
			if e.IsDir() {
				if strings.HasPrefix(rel, "net/ipv4/conf/") && rel != "net/ipv4/conf/all" && rel != "net/ipv4/conf/default" && rel != "net/ipv4/conf" {
					return filepath.SkipDir
				}
				if strings.HasPrefix(rel, "net/ipv4/neigh/") {
					return filepath.SkipDir
				}
				return nil
			}
			if slices.ContainsFunc(volatileSysctls, func(v string) bool { return strings.HasPrefix(rel, v) }) {
				return nil
			}
			info, err := e.Info()
			if err != nil || info.Mode().Perm()&0o200 == 0 {
				return nil //nolint:nilerr // read-only: nothing can set it back
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil //nolint:nilerr // write-only or refusing reads
			}
			h.sysctls[rel] = string(b)
			return nil
		})
	}
	var err error
	if h.mounts, err = mountPoints(); err != nil {
		return nil, err
	}
	if h.nft, err = run("nft", "list", "ruleset"); err != nil {
		return nil, err
	}
	if h.tables, err = nftTables(); err != nil {
		return nil, err
	}
	if h.links, err = links(); err != nil {
		return nil, err
	}
	h.cgroups = cgroupDirs()
	for _, p := range watchedPaths {
		_, err := os.Lstat(p)
		h.paths[p] = err == nil
	}
	return h, nil
}

func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	sort.Strings(out)
	return out, nil
}

func nftTables() ([]string, error) {
	out, err := run("nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var t []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "table ") {
			t = append(t, strings.TrimPrefix(l, "table "))
		}
	}
	sort.Strings(t)
	return t, nil
}

func links() ([]string, error) {
	es, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, nil
}

// cgroupDirs lists the top-level cgroups of every hierarchy: the node's
// root is one, and so would be a kubepods the kubelet made outside it.
// Deeper ones belong to whoever made their parent (the machine's own
// process supervisor makes and removes its own all the time).
func cgroupDirs() []string {
	var out []string
	ds, _ := filepath.Glob("/sys/fs/cgroup/*/*")
	for _, d := range ds {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// restore puts back what the node changed, best effort, then reports what
// still differs. workDir and cgroupRoot are the node's own.
func (h *hostState) restore(workDir, cgroupRoot string) error {
	var errs []error
	// Mounts first (a busy netns or tmpfs keeps directories from going).
	now, _ := mountPoints()
	for i := len(now) - 1; i >= 0; i-- {
		m := now[i]
		ours := (workDir != "" && strings.HasPrefix(m, workDir)) || strings.Contains(m, "/netns/") || strings.HasPrefix(m, "/run/containerd") || strings.HasPrefix(m, "/var/lib/kubelet")
		if ours && !slices.Contains(h.mounts, m) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	tables, _ := nftTables()
	for _, t := range tables {
		if !slices.Contains(h.tables, t) {
			if _, err := run("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ls, _ := links()
	for _, l := range ls {
		// The bridge, and veths whose pod's network namespace outlived it.
		if (l == Bridge || strings.HasPrefix(l, "veth")) && !slices.Contains(h.links, l) {
			if _, err := run("ip", "link", "delete", l); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, removeCgroups(cgroupRoot)...)
	for rel, v := range h.sysctls {
		p := filepath.Join("/proc/sys", rel)
		if cur, err := os.ReadFile(p); err == nil && string(cur) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s back to %q: %w", rel, strings.TrimSpace(v), err))
			}
		}
	}
	for p, existed := range h.paths {
		if !existed {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if workDir != "" {
		if err := os.RemoveAll(workDir); err != nil {
			errs = append(errs, err)
		}
	}
	if d := h.diff(workDir); d != nil {
		errs = append(errs, d)
	}
	return errors.Join(errs...)
}

// removeCgroups kills whatever is left in the node's cgroups (containers
// whose shim went away) and removes them, deepest first.
func removeCgroups(root string) []error {
	var errs []error
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		base := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, pid := range strings.Fields(string(b)) {
					var n int
					if _, err := fmt.Sscan(pid, &n); err == nil && n > 0 {
						_ = syscall.Kill(n, syscall.SIGKILL)
					}
				}
			}
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// diff names what differs from the recorded state.
func (h *hostState) diff(workDir string) error {
	var d []string
	now, err := recordHost()
	if err != nil {
		return err
	}
	for rel, v := range h.sysctls {
		if nv, ok := now.sysctls[rel]; ok && nv != v {
			d = append(d, fmt.Sprintf("sysctl %s is %q, was %q", rel, strings.TrimSpace(nv), strings.TrimSpace(v)))
		}
	}
	if added := minus(now.mounts, h.mounts); len(added) > 0 {
		d = append(d, fmt.Sprintf("mounts left: %v", added))
	}
	if now.nft != h.nft {
		d = append(d, fmt.Sprintf("nftables ruleset differs:\n%s", now.nft))
	}
	if added := minus(now.links, h.links); len(added) > 0 {
		d = append(d, fmt.Sprintf("network interfaces left: %v", added))
	}
	if added := minus(now.cgroups, h.cgroups); len(added) > 0 {
		d = append(d, fmt.Sprintf("cgroups left: %v", added))
	}
	for p, existed := range h.paths {
		if !existed && now.paths[p] {
			d = append(d, "left "+p)
		}
	}
	if workDir != "" {
		if _, err := os.Stat(workDir); err == nil {
			d = append(d, "left "+workDir)
		}
		if pids := processesMentioning(workDir); len(pids) > 0 {
			d = append(d, fmt.Sprintf("processes left: %v", pids))
		}
	}
	if len(d) == 0 {
		return nil
	}
	sort.Strings(d)
	return fmt.Errorf("%w: %s", ErrHostChanged, strings.Join(d, "; "))
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// processesMentioning lists processes whose command line names s (the work
// directory: every process of the node, and containerd's shims, name it).
func processesMentioning(s string) []string {
	var out []string
	ps, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(s)) && filepath.Base(filepath.Dir(p)) != fmt.Sprint(os.Getpid()) {
			out = append(out, filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
		}
	}
	return out
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy (the
// kubelet refuses a root that does not exist); a new cpuset cgroup takes
// no task until it has CPUs and memory nodes, its parent's.
func makeCgroupRoot(root string) error {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		d := filepath.Join(h, root)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("node: cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("node: cgroup %s/%s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}
