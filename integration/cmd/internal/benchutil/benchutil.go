package benchutil

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EnvInt is the positive integer in the environment variable name, else def.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Logf writes a progress line, with the time, to standard error (the
// programs print their results on standard output).
func Logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

// Percentile is the p-th (0..1) of the timings d, nearest rank below; d
// must not be empty.
func Percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// Median is the median of d (the upper one of an even count), 0 for none.
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// ProcMB is a memory field of /proc/<pid>/status ("VmRSS:", "VmHWM:") in
// MiB, 0 when it cannot be read.
func ProcMB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}
