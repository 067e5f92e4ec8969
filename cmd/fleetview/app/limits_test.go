package app

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/stream"
)

func TestLimitOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		set  func(*LimitOptions)
		want []string
	}{
		{"defaults are valid", func(*LimitOptions) {}, nil},
		{"every cap off", func(o *LimitOptions) { *o = LimitOptions{} }, nil},
		{"negative caps", func(o *LimitOptions) { o.MaxListObjects, o.MaxWatches, o.MaxListSnapshots = -1, -1, -1 },
			[]string{"--max-list-objects", "--max-watches must", "--max-list-snapshots must"}},
		{"negative keepalive", func(o *LimitOptions) { o.GRPCKeepaliveTime = -time.Second }, []string{"--grpc-keepalive-time"}},
		{"per-client watches above the server's", func(o *LimitOptions) { o.MaxWatches, o.MaxWatchesPerClient = 10, 11 }, []string{"--max-watches-per-client 11 exceeds"}},
		{"per-client watches without a server cap", func(o *LimitOptions) { o.MaxWatches, o.MaxWatchesPerClient = 0, 50000 }, nil},
		{"per-client snapshots above the reader's", func(o *LimitOptions) { o.MaxListSnapshots, o.MaxListSnapshotsPerClient = 8, 9 }, []string{"--max-list-snapshots-per-client 9 exceeds"}},
		{"request limit too small for a registry", func(o *LimitOptions) { o.MaxRequestBytes = 100 }, []string{"--max-request-bytes 100"}},
		{"negative connection caps and timeouts", func(o *LimitOptions) {
			o.MaxConnections, o.HTTPWriteTimeout, o.GRPCMaxConnectionIdle = -1, -time.Second, -time.Second
		}, []string{"--max-connections must", "--http-write-timeout must", "--grpc-max-connection-idle must"}},
		{"per-client connections above the server's", func(o *LimitOptions) { o.MaxConnections, o.MaxConnectionsPerClient = 100, 101 },
			[]string{"--max-connections-per-client 101 exceeds --max-connections 100"}},
		{"header timeout above the read timeout", func(o *LimitOptions) { o.HTTPReadHeaderTimeout, o.HTTPReadTimeout = time.Minute, time.Second },
			[]string{"--http-read-header-timeout 1m0s exceeds --http-read-timeout 1s"}},
		{"every timeout off", func(o *LimitOptions) {
			o.HTTPReadHeaderTimeout, o.HTTPReadTimeout, o.HTTPWriteTimeout, o.HTTPIdleTimeout, o.GRPCConnectionTimeout, o.GRPCMaxConnectionIdle = 0, 0, 0, 0, 0, 0
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o LimitOptions
			o.AddFlags(pflag.NewFlagSet("test", pflag.ContinueOnError))
			tc.set(&o)
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			joined := fmt.Sprint(errs)
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("errors %q do not mention %q", joined, w)
				}
			}
			for _, e := range errs {
				if !errors.Is(e, ErrInvalidOptions) {
					t.Errorf("%v does not wrap ErrInvalidOptions", e)
				}
			}
		})
	}
}

// TestLimitFlagsReachTheServer: the flags' values are what the query API,
// the Badger reader and the OpenSearch stores are built with.
func TestLimitFlagsReachTheServer(t *testing.T) {
	var o ServeOptions
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--max-list-objects=500", "--max-watches=40", "--max-watches-per-client=4", "--max-request-bytes=65536",
		"--grpc-max-concurrent-streams=16", "--grpc-keepalive-time=30s", "--max-list-snapshots=32", "--max-list-snapshots-per-client=2",
		"--http-read-header-timeout=3s", "--http-read-timeout=4s", "--http-write-timeout=5s", "--http-idle-timeout=6s",
		"--grpc-connection-timeout=7s", "--grpc-max-connection-idle=8s"}); err != nil {
		t.Fatal(err)
	}
	q, s := o.Limits.queryLimits(nil), o.Limits.snapshots()
	if q.MaxListObjects != 500 || q.MaxWatches != 40 || q.MaxWatchesPerClient != 4 || q.MaxRequestBytes != 65536 ||
		q.MaxConcurrentStreams != 16 || q.KeepaliveTime != 30*time.Second || q.KeepaliveMinTime != 10*time.Second {
		t.Fatalf("query limits %+v", q)
	}
	if q.HTTPReadHeaderTimeout != 3*time.Second || q.HTTPReadTimeout != 4*time.Second || q.HTTPWriteTimeout != 5*time.Second ||
		q.HTTPIdleTimeout != 6*time.Second || q.GRPCConnectionTimeout != 7*time.Second || q.GRPCMaxConnectionIdle != 8*time.Second {
		t.Fatalf("connection timeouts %+v", q)
	}
	if d := o.Limits.debugServer().Timeouts; d.ReadHeader != 3*time.Second || d.Write != 5*time.Second {
		t.Fatalf("metrics endpoint timeouts %+v", d)
	}
	if s.MaxSnapshots != 32 || s.MaxSnapshotsPerClient != 2 {
		t.Fatalf("snapshot limits %+v", s)
	}
	c, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	if st := c.openSearch.Store; st.MaxSnapshots != 32 || st.MaxSnapshotsPerClient != 2 {
		t.Fatalf("OpenSearch point-in-time limits %d/%d, want the snapshot flags' 32/2", st.MaxSnapshots, st.MaxSnapshotsPerClient)
	}
}

func TestStreamQuotaOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes int64
		want  string
	}{
		{"default", stream.DefaultMaxBytes, ""},
		{"no quota", 0, ""},
		{"negative", -1, "--stream-max-bytes must not be negative"},
		{"smaller than two messages", stream.MaxPayload, "below twice the largest message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := (&StreamQuotaOptions{StreamMaxBytes: tc.bytes}).Validate()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || !errors.Is(errs[0], ErrInvalidOptions) {
				t.Fatalf("errors %v, want one naming %q", errs, tc.want)
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	twoGi := func() (uint64, error) { return 2 << 30, nil }
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	for _, tc := range []struct {
		in     string
		cgroup func() (uint64, error)
		want   int64
		bad    bool
	}{
		{in: "", want: 0},
		{in: "0", want: 0},
		{in: "1Gi", want: 1 << 30},
		{in: "1Gi", cgroup: twoGi, want: 1 << 30},
		{in: "800M", want: 800e6},
		{in: "64Mi", want: 64 << 20},
		{in: "auto", cgroup: twoGi, want: 1932735283}, // 90% of 2Gi
		{in: "auto", cgroup: noLimit, want: 0},
		{in: "auto", cgroup: func() (uint64, error) { return 0, memlimit.ErrNoCgroup }, want: 0},
		{in: "auto", cgroup: func() (uint64, error) { return 16 << 20, nil }, want: minMemoryLimit},
		{in: "auto", cgroup: func() (uint64, error) { return math.MaxUint64, nil }, want: 0},
		{in: "1Mi", bad: true},
		{in: "-1Gi", bad: true},
		{in: "lots", bad: true},
		{in: "Auto", bad: true},
	} {
		cgroup := tc.cgroup
		if cgroup == nil {
			cgroup = func() (uint64, error) { t.Errorf("%q read the cgroup", tc.in); return 0, nil }
		}
		o := MemoryOptions{MemoryLimit: tc.in, cgroupLimit: cgroup}
		got, _, err := o.limit()
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "--memory-limit") || len(o.Validate()) != 1 {
				t.Errorf("%q: want an error naming --memory-limit, got %d, %v", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || len(o.Validate()) != 0 {
			t.Errorf("%q: got %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestWarnFileLimit: a cap the open-file limit cannot hold (with the
// reserve NATS and Badger need) is warned about at start; one it can is
// not.
func TestWarnFileLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < 2*fileReserve {
		t.Fatalf("RLIMIT_NOFILE %d is below what this test needs (%d)", rl.Cur, 2*fileReserve)
	}
	cases := []struct {
		name string
		max  int
		want string
	}{
		{"within the limit", 10, ""},
		{"over the limit", int(rl.Cur), "open-file limit is below"},
		{"no cap", 0, "no cap"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			o := LimitOptions{MaxConnections: tc.max}
			o.warnFileLimit(slog.New(slog.NewTextHandler(&buf, nil)))
			if tc.want == "" && buf.Len() > 0 || tc.want != "" && !strings.Contains(buf.String(), tc.want) {
				t.Fatalf("logged %q, want %q", buf.String(), tc.want)
			}
		})
	}
}
