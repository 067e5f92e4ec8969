package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// reportMedian prints the median of several runs of one measurement, with
// every run's rate (nothing for fewer than two runs).
func reportMedian(what string, n int, ds []time.Duration) {
	if len(ds) < 2 {
		return
	}
	rates := make([]float64, len(ds))
	each := make([]string, len(ds))
	for i, d := range ds {
		rates[i] = float64(n) / d.Seconds()
		each[i] = fmt.Sprintf("%.1fk/s %.1f s", rates[i]/1000, d.Seconds())
	}
	m := median(rates)
	fmt.Printf("  %-55s %8.0f events/s  (%.2f s for %d; runs: %s)\n", what+", median of "+strconv.Itoa(len(ds)), m, float64(n)/m, n, strings.Join(each, ", "))
}

func report(what string, n int, d time.Duration, extra string) {
	fmt.Printf("  %-55s %8.0f events/s  (%d in %v) %s\n", what, float64(n)/d.Seconds(), n, d.Round(time.Millisecond), extra)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 0:
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
