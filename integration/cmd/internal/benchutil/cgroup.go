package benchutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// JoinCgroup moves pid into the cgroup.
func JoinCgroup(cgroup string, pid int) error {
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into %s: %w", pid, cgroup, err)
	}
	return nil
}

// NewMemoryCgroup creates the memory cgroup name (v1 or v2) under this
// process's own, limited to limit bytes, as a container's limit holds its
// processes, and returns its directory.
func NewMemoryCgroup(name string, limit int64) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile string
		switch {
		case parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			root := "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
				root = "/sys/fs/cgroup/unified"
			}
			ctrl, err := os.ReadFile(filepath.Join(root, parts[2], "cgroup.subtree_control"))
			if err != nil || !strings.Contains(string(ctrl), "memory") {
				continue // no memory controller delegated here
			}
			dir, limitFile = filepath.Join(root, parts[2]), "memory.max"
		default:
			continue
		}
		cg := filepath.Join(dir, name)
		if err := os.Mkdir(cg, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(cg)
			return "", err
		}
		return cg, nil
	}
	return "", errors.New("no writable memory cgroup controller")
}

// OOMKills is how many processes the OOM killer killed in the cgroup.
func OOMKills(cg string) int {
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(cg, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return 0
}

// CgroupPeak is the cgroup's peak memory use (heap and page cache), bytes.
func CgroupPeak(cg string) (int64, error) {
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		if b, err := os.ReadFile(filepath.Join(cg, f)); err == nil {
			return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no peak memory figure in %s", cg)
}
