package main

import (
	"os"
	"runtime"
	"runtime/debug"
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
	mu     sync.Mutex
	peak   float64
	done   chan struct{}
	wg     sync.WaitGroup
}

// rssEvery is the sampling interval: a 150k-row answer takes seconds.
const rssEvery = 20 * time.Millisecond

func startRSSSampler() *rssSampler {
	runtime.GC()
	debug.FreeOSMemory()
	s := &rssSampler{steady: benchutil.ProcMB(os.Getpid(), "VmRSS:"), done: make(chan struct{})}
	s.peak = s.steady
	s.wg.Go(func() {
		t := time.NewTicker(rssEvery)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				v := benchutil.ProcMB(os.Getpid(), "VmRSS:")
				s.mu.Lock()
				s.peak = max(s.peak, v)
				s.mu.Unlock()
			}
		}
	})
	return s
}

// stop ends the sampling and returns the steady and peak RSS, in MB.
func (s *rssSampler) stop() (steady, peak float64) {
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steady, s.peak
}
