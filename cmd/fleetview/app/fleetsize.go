package app

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"os"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// A hub's cost per member cluster, measured by the fleet benchmark
// (N clusters beside 3 holding the same Pods; the figures:
// docs/benchmarks/fleet.md#results and the later runs on that page): a
// megabyte or so of RSS per cluster at rest, NATS's per-account, stream,
// consumer and connection state, the materializer's consumer, and the Go
// heap's headroom over all of it (the NATS server's own share: bench-natsfloor,
// docs/benchmarks/fleet.md#what-the-nats-server-holds-per-cluster-alone-2026-12-05-afternoon).
// The check uses 3 MB, what a fleet-wide ingest costs on top: that hub's
// peak was about twice its rest, and it was killed in a container that
// held its rest during a registry change that made every collector
// publish at once (each append reads its stream's last block back into
// memory; docs/benchmarks/fleet.md#in-a-memory-limited-container). And two
// open files (its stream's message block and its collector's connection).
// hubBaseMemory is an idle hub's RSS before any object is cached; the
// objects a fleet caches come on top and depend on the fleet, not on its
// number of clusters.
const (
	perClusterMemory = 3_000_000
	hubBaseMemory    = 100 << 20
	perClusterFiles  = 2
	hubBaseFiles     = 64
)

// hostLimits are the limits a fleet's per-cluster costs run into.
type hostLimits struct {
	// memory is the memory the hub may use (0: unknown) and memorySource
	// where it was read.
	memory       int64
	memorySource string
	// files is the open-file limit (0: unknown).
	files uint64
	// storeClusters is how many clusters JetStream's storage holds at the
	// streams' quota (0: no bound).
	storeClusters int
}

// fleetSize is the startup check of a fleet of clusters against limits:
// what each per-cluster cost comes to, how many clusters each limit
// allows (-1: no bound), and the limit such a fleet meets first.
type fleetSize struct {
	clusters                               int
	limits                                 hostLimits
	memory                                 int64
	files                                  uint64
	memoryAllows, filesAllows, storeAllows int
	first                                  string // the limit the fewest clusters exhaust
	firstAllows                            int
}

func checkFleetSize(clusters int, l hostLimits) fleetSize {
	f := fleetSize{clusters: clusters, limits: l, memory: hubBaseMemory + int64(clusters)*perClusterMemory,
		files: hubBaseFiles + uint64(clusters)*perClusterFiles, memoryAllows: -1, filesAllows: -1, storeAllows: -1, firstAllows: -1}
	if l.memory > 0 {
		f.memoryAllows = int(max(0, (l.memory-hubBaseMemory)/perClusterMemory))
	}
	if l.files > 0 {
		f.filesAllows = int(max(0, (int64(l.files)-hubBaseFiles)/perClusterFiles))
	}
	if l.storeClusters > 0 {
		f.storeAllows = l.storeClusters
	}
	for _, c := range []struct {
		name   string
		allows int
	}{{"memory", f.memoryAllows}, {"open files", f.filesAllows}, {"JetStream storage", f.storeAllows}} {
		if c.allows >= 0 && (f.firstAllows < 0 || c.allows < f.firstAllows) {
			f.first, f.firstAllows = c.name, c.allows
		}
	}
	return f
}

// over reports a fleet above four fifths of what its first limit allows.
func (f fleetSize) over() bool {
	return f.firstAllows >= 0 && int64(f.clusters)*10 > int64(f.firstAllows)*8
}

// log writes the check: a warning when the fleet is within a fifth of
// the first limit it meets, else one line of information.
func (f fleetSize) log(log *slog.Logger) {
	attrs := []any{"clusters", f.clusters, "memoryEstimate", f.memory, "memoryLimit", f.limits.memory, "memoryLimitFrom", f.limits.memorySource,
		"clustersMemoryAllows", f.memoryAllows, "openFilesEstimate", f.files, "openFilesLimit", f.limits.files,
		"clustersOpenFilesAllow", f.filesAllows, "clustersStorageAllows", f.storeAllows, "firstLimit", f.first, "clustersFirstLimitAllows", f.firstAllows}
	if f.over() {
		log.Warn(fmt.Sprintf("fleet size: %d member clusters are near or past what %s allows (about %d clusters at %.1f MB and %d open files per cluster); raise it or split the fleet over hubs",
			f.clusters, f.first, f.firstAllows, float64(perClusterMemory)/1e6, perClusterFiles), attrs...)
		return
	}
	log.Info("fleet size: per-cluster costs against this host's limits", attrs...)
}

// readHostLimits reads the hub's limits: memory from the Go runtime's
// limit (--memory-limit, or "auto"'s share of the cgroup's; from says
// which), else the cgroup's memory limit, else the machine's memory;
// open files from RLIMIT_NOFILE (Go raises the soft limit to the hard
// one at start).
func readHostLimits(memoryLimit int64, from string, storeClusters int) hostLimits {
	l := hostLimits{storeClusters: storeClusters}
	switch {
	case memoryLimit > 0:
		l.memory, l.memorySource = memoryLimit, from
	default:
		if n, err := memlimit.FromCgroup(); err == nil && n > 0 && n <= math.MaxInt64 {
			l.memory, l.memorySource = int64(n), "cgroup memory limit"
		}
		if l.memory == 0 {
			if n := memTotal(); n > 0 {
				l.memory, l.memorySource = n, "MemTotal"
			}
		}
	}
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err == nil && r.Cur != ^uint64(0) {
		l.files = r.Cur
	}
	return l
}

// memTotal is /proc/meminfo's MemTotal in bytes (0: unknown).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(s.Text(), "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}
