package queryapi

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

// The hub is ready once the materializer has applied each stream through
// its last sequence at start, or nothing is left to apply before it
// (messages deleted since); a cluster's record takes no part.
func TestReadyOnceCaughtUpAtStart(t *testing.T) {
	_, _, js := natstest.Start(t, -1)
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig("member1", 1, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"a", "b", "c"} {
		if _, err := js.Publish(ctx, "fv.obj.member1.core.v1.pods."+uid, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var applied atomic.Uint64
	// A record claiming nothing synced: it must not hold the hub back.
	cat := catalog.Fixed([]*inventory.Cluster{{Name: "member1", Ready: true,
		Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Secret"}}}}, nil)
	s := &syncChecker{js: js, catalog: cat, applied: func() map[string]uint64 { return map[string]uint64{"member1": applied.Load()} }}
	applied.Store(1)
	if ok, why := s.check(ctx); ok || !strings.Contains(why, "member1 (applied 1 of 3)") {
		t.Fatalf("behind the stream: ready %v %q", ok, why)
	}
	for _, seq := range []uint64{2, 3} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if ok, why := s.check(ctx); !ok {
		t.Fatalf("nothing left to apply: not ready: %q", why)
	}
	// Latched: once caught up, later lag is per-cluster sync, not the hub's.
	if _, err := js.Publish(ctx, "fv.obj.member1.core.v1.pods.d", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if ok, why := s.check(ctx); !ok {
		t.Fatalf("after catching up once: not ready: %q", why)
	}
}
