package app

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryOptions bound the Go heap of a long-running process.
type MemoryOptions struct {
	// MemoryLimit is a soft limit on the Go runtime's memory (a Kubernetes
	// quantity, e.g. "1Gi"; "" or "0": none). GOMEMLIMIT wins when set.
	MemoryLimit string
}

// minMemoryLimit: below it the GC would run back to back holding even an
// empty store.
const minMemoryLimit = 64 << 20

const memoryLimitHelp = "soft limit of the Go runtime's memory, as a Kubernetes quantity (e.g. 1Gi; set it to about 80% of the container's memory limit): " +
	"the garbage collector works harder as the heap nears it instead of letting garbage double the heap after an ingest or a churn storm. " +
	"Badger's memtables and caches count towards it; mmapped files do not. GOMEMLIMIT wins when set. Empty or 0: no limit"

// AddFlags registers the flags.
func (o *MemoryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", "", memoryLimitHelp)
}

// Validate reports every problem at once.
func (o *MemoryOptions) Validate() []error {
	if _, err := o.limit(); err != nil {
		return []error{err}
	}
	return nil
}

// limit is the limit in bytes (0: none).
func (o *MemoryOptions) limit() (int64, error) {
	if o.MemoryLimit == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil {
		return 0, fmt.Errorf("%w: --memory-limit %q: %v", ErrInvalidOptions, o.MemoryLimit, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 || (n > 0 && n < minMemoryLimit) {
		return 0, fmt.Errorf("%w: --memory-limit %q: want 0 or at least 64Mi", ErrInvalidOptions, o.MemoryLimit)
	}
	return n, nil
}

// apply sets the runtime's soft memory limit unless GOMEMLIMIT is set.
func (o *MemoryOptions) apply(log *slog.Logger) {
	n, err := o.limit()
	if err != nil || n == 0 {
		return
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("GOMEMLIMIT is set; --memory-limit ignored", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		return
	}
	debug.SetMemoryLimit(n)
	log.Info("Go memory limit set", "bytes", n)
}
