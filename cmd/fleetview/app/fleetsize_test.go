package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestCheckFleetSize(t *testing.T) {
	const mb = 1_000_000
	cases := []struct {
		name        string
		clusters    int
		limits      hostLimits
		first       string
		firstAllows int
		over        bool
	}{
		{"no limit known", 2000, hostLimits{}, "", -1, false},
		{"memory first", 2000, hostLimits{memory: 2 << 30, files: 1 << 20}, "memory", int((2<<30 - hubBaseMemory) / perClusterMemory), true},
		{"a small fleet far inside", 10, hostLimits{memory: 2 << 30, files: 1 << 20}, "memory", int((2<<30 - hubBaseMemory) / perClusterMemory), false},
		{"open files first", 1000, hostLimits{memory: 64 << 30, files: 1024}, "open files", (1024 - hubBaseFiles) / perClusterFiles, true},
		{"storage first", 300, hostLimits{memory: 64 << 30, files: 1 << 20, storeClusters: 320}, "JetStream storage", 320, true},
		{"within four fifths", 256, hostLimits{storeClusters: 320}, "JetStream storage", 320, false},
		{"memory below the base", 3, hostLimits{memory: 50 * mb}, "memory", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := checkFleetSize(c.clusters, c.limits)
			if f.first != c.first || f.firstAllows != c.firstAllows || f.over() != c.over {
				t.Errorf("first %q allows %d over %v, want %q %d %v", f.first, f.firstAllows, f.over(), c.first, c.firstAllows, c.over)
			}
			if want := hubBaseMemory + int64(c.clusters)*perClusterMemory; f.memory != want {
				t.Errorf("memory estimate %d, want %d", f.memory, want)
			}
		})
	}
}

// syncBuffer is a log destination the hub's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUpNamesTheLimitAFleetMeets: `fleetview up` (in process, its real
// embedded NATS) with 300 member clusters' credentials and a 256 MiB
// memory limit warns at start that memory is the limit this fleet meets,
// and how many clusters it allows; with 3 clusters it only informs.
func TestUpNamesTheLimitAFleetMeets(t *testing.T) {
	for _, c := range []struct {
		clusters int
		want     string
	}{
		{300, `level=WARN msg="fleet size: 300 member clusters are near or past what memory allows (about 54 clusters`},
		{3, `level=INFO msg="fleet size: per-cluster costs against this host's limits" clusters=3`},
	} {
		t.Run(fmt.Sprint(c.clusters), func(t *testing.T) {
			dir := t.TempDir()
			var users strings.Builder
			for i := range c.clusters {
				p := make([]byte, 16)
				_, _ = rand.Read(p)
				fmt.Fprintf(&users, "c%04d:%s\n", i, hex.EncodeToString(p))
			}
			usersFile := filepath.Join(dir, "users")
			if err := os.WriteFile(usersFile, []byte(users.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			var o UpOptions
			fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse([]string{"--nats-users-file", usersFile, "--nats-port", "-1", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
				"--state-dir", filepath.Join(dir, "state"), "--memory-limit", "256Mi"}); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- RunUp(ctx, o, slog.New(slog.NewTextHandler(&logs, nil))) }()
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(logs.String(), "fleet size:") && time.Now().Before(deadline) {
				select {
				case err := <-done:
					t.Fatalf("up ended: %v\n%s", err, logs.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), c.want) {
				t.Fatalf("log lacks %q:\n%.3000s", c.want, logs.String())
			}
		})
	}
}
