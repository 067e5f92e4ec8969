package benchutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// ErrStop, wrapped in what a WaitFor condition returns, ends the wait at
// once (the process it waits on exited).
var ErrStop = errors.New("gave up")

// WaitFor polls cond every interval until it holds or timeout passes; the
// last error it returned names what was still missing. The interval is
// the resolution of whatever the caller times with it.
func WaitFor(ctx context.Context, timeout, every time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrStop) || time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// ApplyRegistry creates or replaces the ResourceRegistry name selecting
// sels on every cluster, through the hub's REST API at rest, as the
// token's user ("": none), retried for a minute while the hub starts.
func ApplyRegistry(ctx context.Context, rest, token, name string, sels []any) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"targetCluster": map[string]any{}, "resourceSelectors": sels},
	})
	if err != nil {
		return err
	}
	return WaitFor(ctx, time.Minute, 100*time.Millisecond, "apply the registry", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rest+"/v1/registries", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /v1/registries: %d %s", resp.StatusCode, b)
		}
		return nil
	})
}

// ClockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux).
const ClockTick = 10 * time.Millisecond

// ProcessCPU is the user and system CPU time pid has used so far.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %.100s", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %.100s", pid, b)
	}
	// utime and stime are fields 14 and 15, the 12th and 13th after ')'.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * ClockTick, nil
}

// PIDsNamed are the processes whose command name (/proc/<pid>/comm) is
// comm, such as the kube-apiservers and etcds a benchmark started.
func PIDsNamed(comm string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, pid)
		}
	}
	return out
}
