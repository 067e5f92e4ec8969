package app

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryOptions bound the Go heap of a long-running process.
type MemoryOptions struct {
	// MemoryLimit is a soft limit on the Go runtime's memory: "auto"
	// (autoMemoryPercent of the cgroup's memory limit when the process has
	// one, else none), a Kubernetes quantity (e.g. "1Gi"), or "" / "0"
	// for none. GOMEMLIMIT wins when set.
	MemoryLimit string
	// cgroupLimit reads the cgroup's memory limit (v1 or v2); nil:
	// memlimit.FromCgroup. Tests replace it.
	cgroupLimit func() (uint64, error)
}

// minMemoryLimit: below it the GC would run back to back holding even an
// empty store.
const minMemoryLimit = 64 << 20

// autoMemory is the default: the limit follows the container's.
const autoMemory = "auto"

// autoMemoryPercent is the share of a cgroup's memory limit "auto" gives the
// Go runtime, as Prometheus' --auto-gomemlimit does: the rest is room for
// what the runtime does not count, mostly the pages of files Badger maps,
// which the kernel reclaims first when the cgroup nears its limit. Without
// a soft limit, the default GOGC lets garbage double the heap after a full
// sync (measured at 2,000 clusters x 500 Pods:
// docs/benchmarks/fleet.md#figures-behind-code-comments), and a container
// at its limit is killed.
const autoMemoryPercent = 90

const memoryLimitHelp = "soft limit of the Go runtime's memory: auto (%d%% of the container's cgroup memory limit when it has one, else none), " +
	"a Kubernetes quantity (e.g. 1Gi), or 0 for none. " +
	"The garbage collector works harder as the heap nears it instead of letting garbage double the heap after an ingest or a churn storm. " +
	"Badger's memtables and caches count towards it; mmapped files do not. GOMEMLIMIT wins when set"

// AddFlags registers the flags.
func (o *MemoryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", autoMemory, fmt.Sprintf(memoryLimitHelp, autoMemoryPercent))
}

// Validate reports every problem at once.
func (o *MemoryOptions) Validate() []error {
	if _, _, err := o.limit(); err != nil {
		return []error{err}
	}
	return nil
}

// limit is the limit in bytes (0: none) and where it came from.
func (o *MemoryOptions) limit() (int64, string, error) {
	switch o.MemoryLimit {
	case "":
		return 0, "", nil
	case autoMemory:
		read := o.cgroupLimit
		if read == nil {
			read = memlimit.FromCgroup
		}
		// No cgroup, or one without a limit: no limit, as without the
		// flag (ErrNoLimit, ErrNoCgroup, or no cgroup filesystem).
		n, err := read()
		if err != nil || n == 0 || n > math.MaxInt64 {
			return 0, "", nil
		}
		return max(int64(float64(n)*autoMemoryPercent/100), minMemoryLimit), fmt.Sprintf("%d%% of the cgroup memory limit", autoMemoryPercent), nil
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil {
		return 0, "", fmt.Errorf("%w: --memory-limit %q: want auto, 0 or a quantity: %v", ErrInvalidOptions, o.MemoryLimit, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 || (n > 0 && n < minMemoryLimit) {
		return 0, "", fmt.Errorf("%w: --memory-limit %q: want auto, 0 or at least 64Mi", ErrInvalidOptions, o.MemoryLimit)
	}
	return n, "--memory-limit", nil
}

// apply sets the runtime's soft memory limit unless GOMEMLIMIT is set.
func (o *MemoryOptions) apply(log *slog.Logger) {
	n, from, err := o.limit()
	if err != nil || n == 0 {
		return
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("GOMEMLIMIT is set; --memory-limit ignored", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		return
	}
	debug.SetMemoryLimit(n)
	log.Info("Go memory limit set", "bytes", n, "from", from)
}
