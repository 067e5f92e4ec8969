package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/fleetview/fleetview/integration/cmd/internal/benchutil"
)

// rssSampler records this process's peak RSS while it runs, against its
// steady RSS when it started: the hub runs in this process, and what the
// benchmark itself left on the heap is returned first, so the steady
// figure is the hub's at rest (with the benchmark's live state).
type rssSampler struct {
	steady float64
	// live is the Go heap's live bytes at the start, goal the highest
	// heap goal of the garbage collector seen since (MiB): with GOGC=100
	// the heap may grow to twice what is live before a collection, so
	// RSS rises with garbage up to the goal whatever one answer holds.
	live float64
	mu   sync.Mutex
	peak float64
	goal float64
	done chan struct{}
	wg   sync.WaitGroup
	// status reads the RSS without garbage (statusRSS).
	status []byte
}

// statusRSS is this process's VmRSS in MiB, read into s.status (reused):
// benchutil.ProcMB's file read, string and split lines every 20 ms were
// garbage in the hub's process, which the RSS row counted as the hub's.
func (s *rssSampler) statusRSS(f *os.File) float64 {
	if cap(s.status) == 0 {
		s.status = make([]byte, 16<<10)
	}
	n, err := f.ReadAt(s.status[:cap(s.status)], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	b := s.status[:n]
	i := bytes.Index(b, []byte("VmRSS:"))
	if i < 0 {
		return 0
	}
	kb := 0
	for _, c := range bytes.TrimLeft(b[i+len("VmRSS:"):], " \t") {
		if c < '0' || c > '9' {
			break
		}
		kb = kb*10 + int(c-'0')
	}
	return float64(kb) / 1024
}

// heapMiB reads the Go runtime's metric name in MiB.
func heapMiB(name string) float64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// rssEvery is the sampling interval: a 150k-row answer takes seconds.
const rssEvery = 20 * time.Millisecond

func startRSSSampler() *rssSampler {
	runtime.GC()
	debug.FreeOSMemory()
	s := &rssSampler{steady: benchutil.ProcMB(os.Getpid(), "VmRSS:"), live: heapMiB("/gc/heap/live:bytes"), done: make(chan struct{})}
	s.peak, s.goal = s.steady, heapMiB("/gc/heap/goal:bytes")
	s.wg.Go(func() {
		t := time.NewTicker(rssEvery)
		defer t.Stop()
		f, err := os.Open("/proc/self/status")
		if err != nil {
			panic(fmt.Sprintf("the RSS sampler cannot read its status: %v", err))
		}
		defer f.Close()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				v, g := s.statusRSS(f), heapMiB("/gc/heap/goal:bytes")
				s.mu.Lock()
				s.peak, s.goal = max(s.peak, v), max(s.goal, g)
				s.mu.Unlock()
			}
		}
	})
	return s
}

// stop ends the sampling and returns the steady and peak RSS, the live
// heap at the start and the highest heap goal, in MiB.
func (s *rssSampler) stop() (steady, peak, live, goal float64) {
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steady, s.peak, s.live, s.goal
}
