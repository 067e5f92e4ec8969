package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memCgroup is a memory cgroup a hub runs in (FV_FLEET_HUB_MEMORY), as a
// container's memory limit holds it: the kernel reclaims the hub's file
// pages (Badger's mapped tables) at the limit and kills it when its own
// memory passes the limit, and the hub's --memory-limit (auto by
// default) reads the limit to bound its Go heap. cgroup v2 (memory.max)
// or v1 (memory.limit_in_bytes), whichever the machine mounts.
type memCgroup struct {
	dir string
	v1  bool
}

func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	c := &memCgroup{dir: filepath.Join("/sys/fs/cgroup", name)}
	limitFile := "memory.max"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		c.dir, c.v1, limitFile = filepath.Join("/sys/fs/cgroup/memory", name), true, "memory.limit_in_bytes"
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("FV_FLEET_HUB_MEMORY: a memory cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return nil, fmt.Errorf("FV_FLEET_HUB_MEMORY: the cgroup's limit: %w", err)
	}
	return c, nil
}

// add moves pid into the cgroup.
func (c *memCgroup) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// peakMB is the most memory the cgroup held (its processes' memory and
// the page cache they caused), and events says how often it hit the
// limit and whether the kernel killed anything for it.
func (c *memCgroup) peakMB() float64 {
	f := "memory.peak"
	if c.v1 {
		f = "memory.max_usage_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, f))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return n / (1 << 20)
}

func (c *memCgroup) events() string {
	f := "memory.events"
	if c.v1 {
		f = "memory.oom_control"
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, f))
	if c.v1 {
		if fc, err := os.ReadFile(filepath.Join(c.dir, "memory.failcnt")); err == nil {
			b = append(b, "failcnt "+string(fc)...)
		}
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// remove deletes the cgroup once its processes are gone.
func (c *memCgroup) remove() error { return os.Remove(c.dir) }
