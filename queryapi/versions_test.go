package queryapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
)

func fleetVersion(n int, seq uint64) query.Version {
	v := query.Version{}
	for i := range n {
		v[fmt.Sprintf("c%04d", i)] = seq + uint64(i)
	}
	return v
}

// TestVersionBookBounded: on a real JetStream, a resourceVersion's size
// does not depend on the fleet's, it resolves on another replica and after
// a restart (a new book on the same streams), and one whose epoch is gone
// is 410.
func TestVersionBookBounded(t *testing.T) {
	ctx := context.Background()
	_, _, js := natstest.Start(t, -1)
	sealer := query.NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	a := newVersionBook(js, sealer, time.Hour, 1)
	sizes := map[int]int{}
	for _, n := range []int{3, 200, 2000} {
		list := fleetVersion(n, 1000)
		rv, err := a.Seal(ctx, list, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The next event of one cluster, as a watch sends it: the delta of
		// one cluster against the list's epoch.
		ev := list.Clone()
		ev["c0001"] += 7
		evRV, err := a.Seal(ctx, ev, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sizes[n] = len(evRV)
		t.Logf("%d clusters: list resourceVersion %d bytes, event resourceVersion %d bytes", n, len(rv), len(evRV))
		// Up to MaxVersionDelta clusters ride in the token itself (a
		// 3-cluster fleet needs no epoch), so the bound is about 100 bytes
		// with names like these, whatever the fleet.
		if len(rv) > 100 || len(evRV) > 100 {
			t.Errorf("%d clusters: versions of %d and %d bytes", n, len(rv), len(evRV))
		}
		// Another replica, and a restarted one: books that share only the
		// streams and the key.
		b := newVersionBook(js, sealer, time.Hour, 1)
		for want, tok := range map[string]string{fmt.Sprint(list): rv, fmt.Sprint(ev): evRV} {
			got, err := b.open(ctx, tok)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.Seqs) != want {
				t.Fatalf("%d clusters: another book resolved %s to a different vector", n, tok)
			}
		}
	}
	if sizes[200] != sizes[2000] {
		t.Errorf("event resourceVersion of %d bytes at 200 clusters, %d at 2,000", sizes[200], sizes[2000])
	}

	// A delta beyond the bound rebases: a new epoch, an empty delta.
	v := fleetVersion(200, 1000)
	for i := range query.MaxVersionDelta + 1 {
		v[fmt.Sprintf("c%04d", i)]++
	}
	rv, err := a.Seal(ctx, v, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := sealer.OpenEpoch(rv)
	if err != nil || len(tok.Delta) != 0 {
		t.Fatalf("a delta of %d clusters did not rebase: %+v, %v", query.MaxVersionDelta+1, tok, err)
	}

	// Epochs that are gone (aged out, or the stream was lost): 410 naming the version.
	if err := js.DeleteStream(ctx, VersionStream); err != nil {
		t.Fatal(err)
	}
	fresh := newVersionBook(js, sealer, time.Hour, 1)
	if _, err := fresh.open(ctx, rv); !errors.Is(err, query.ErrExpired) || !containsAll(err.Error(), "resourceVersion", "no longer kept") {
		t.Fatalf("version of a lost epoch: %v, want ErrExpired naming it", err)
	}
	// Garbage: 400 naming resourceVersion.
	if _, err := fresh.open(ctx, "fv2.garbage"); !errors.Is(err, query.ErrInvalid) || !containsAll(err.Error(), "resourceVersion", "fv2.garbage") {
		t.Fatalf("garbage version: %v, want ErrInvalid naming it", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
