package natsserver

import (
	"errors"
	"strings"
	"testing"
)

func TestStreamQuota(t *testing.T) {
	const gib, mib = int64(1 << 30), int64(1 << 20)
	for _, tc := range []struct {
		name     string
		quota    int64
		clusters int
		store    int64
		want     int64
		wantErr  bool
	}{
		{"fits", gib, 3, 100 * gib, gib, false},
		{"no quota", 0, 200, 10 * gib, 0, false},
		{"no clusters", gib, 0, 10 * gib, gib, false},
		{"store unknown", gib, 200, 0, gib, false},
		{"200 clusters on 60 GiB: an equal share of nine tenths, in whole MiB", gib, 200, 60 * gib, (60 * gib / 10 * 9 / 200) &^ (mib - 1), false},
		{"exactly nine tenths", gib, 9, 10 * gib, gib, false},
		{"2,000 clusters on 10 GiB: below twice the largest message", gib, 2000, 10 * gib, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StreamQuota(tc.quota, tc.clusters, tc.store)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("StreamQuota(%d, %d, %d) = %d, %v; want %d (error %v)", tc.quota, tc.clusters, tc.store, got, err, tc.want, tc.wantErr)
			}
			if err != nil && (!errors.Is(err, ErrStoreTooSmall) || !strings.Contains(err.Error(), "2000 member clusters")) {
				t.Fatalf("error %v: want ErrStoreTooSmall naming the fleet", err)
			}
			if tc.store > 0 && got > 0 && got*int64(tc.clusters) > tc.store {
				t.Fatalf("%d streams of %d reserve more than the store's %d", tc.clusters, got, tc.store)
			}
		})
	}
}
