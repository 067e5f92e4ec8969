package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
)

// TestNewRetriesRoutesAndReleasesTheStore: the route reads, then the
// OpenSearch backends' read of the registries, go through the caller's
// retry, and a New that fails after opening Badger closes it (a
// restarted hub whose first reads failed panicked closing a nil Set
// instead, and its next start must find the store unlocked).
func TestNewRetriesRoutesAndReleasesTheStore(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := natstest.Start(t, 0)
	bk, err := store.OpenBuckets(ctx, nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	errNotYet := errors.New("bucket replica not caught up")

	tests := []struct {
		name      string
		failures  int // attempts the retry sees fail before giving up or succeeding
		giveUp    bool
		wantError bool
	}{
		{name: "gives up", failures: 1, giveUp: true, wantError: true},
		{name: "succeeds after failures", failures: 2},
		{name: "first attempt", failures: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var whats []string
			attempts := 0
			retry := func(ctx context.Context, what string, f func(context.Context) error) error {
				whats = append(whats, what)
				for {
					attempts++
					if attempts <= tc.failures {
						if tc.giveUp {
							return errNotYet
						}
						continue
					}
					return f(ctx)
				}
			}
			s, err := store.New(ctx, store.Config{NATS: nc, Buckets: bk, StateDir: dir, Default: badger.Kind(badger.KindOptions{}), Retry: retry})
			want := []string{"backend routes", "OpenSearch backends"}
			if tc.giveUp {
				want = want[:1] // New ends at the routes' error
			}
			if !slices.Equal(whats, want) {
				t.Fatalf("retried steps = %q, want %q", whats, want)
			}
			if tc.wantError {
				if !errors.Is(err, errNotYet) || s != nil {
					t.Fatalf("New = %v, %v; want nil and the retry's error", s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if attempts != tc.failures+2 { // the routes' failures and success, then the OpenSearch step
				t.Fatalf("attempts = %d, want %d", attempts, tc.failures+2)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
