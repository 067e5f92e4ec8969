package queryapi

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/registry"
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

// A cluster's sync marker is read once per inventory record: a prober
// polling /readyz/clusters at 2,000 clusters made a direct get per
// cluster and resource on every call. A new record (the collector writes
// one after each marker, and each heartbeat) reads the marker again.
func TestClusterSyncedReadsEachMarkerOncePerRecord(t *testing.T) {
	_, _, js := natstest.Start(t, -1)
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig("member1", 1, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	marker := func() uint64 {
		t.Helper()
		ack, err := js.Publish(ctx, stream.ControlSubject("member1", pods), []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	record := func() *inventory.Cluster {
		return &inventory.Cluster{Name: "member1", Ready: true,
			Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Synced: true}}}
	}
	s := &syncChecker{js: js}
	synced := func(rec *inventory.Cluster, applied uint64) (bool, string) {
		t.Helper()
		ok, why, err := s.clusterSynced(ctx, nil, rec, map[string]uint64{"member1": applied}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok, why
	}
	first := marker()
	rec := record()
	if ok, why := synced(rec, first-1); ok || !strings.Contains(why, "sync marker at") {
		t.Fatalf("behind the marker: synced %v %q", ok, why)
	}
	if ok, why := synced(rec, first); !ok {
		t.Fatalf("at the marker: %q", why)
	}
	// A resync's marker, the record not yet rewritten: the cached marker
	// judges, with no read (the stream is even gone).
	second := marker()
	if err := js.DeleteStream(ctx, st.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	if ok, why := synced(rec, first); !ok {
		t.Fatalf("same record: read again (%q)", why)
	}
	// The next record reads it: the stream is gone, so the read fails.
	if _, _, err := s.clusterSynced(ctx, nil, record(), map[string]uint64{"member1": second}, nil); err == nil {
		t.Fatal("a new record did not read the marker again")
	}
	// A cache applied through its stream's end (one listing of every
	// stream's last sequence) has applied every marker: none is read.
	ends := map[string]uint64{"member1": second}
	if ok, why, err := s.clusterSynced(ctx, nil, record(), map[string]uint64{"member1": second}, ends); err != nil || !ok {
		t.Fatalf("applied through the stream's end: synced %v %q %v", ok, why, err)
	}
	// Clusters gone from the catalog leave the cache.
	s.markers.keep([]string{"member2"})
	if _, ok := s.markers.get(rec, pods); ok {
		t.Fatal("member1's markers kept after it left")
	}
}

// A wildcard registry's kinds are what the collector expanded it to: the
// cluster is not synced until its record says it reconciled the
// registry's generation, however synced the resources listed before.
func TestClusterSyncedWaitsForWildcardExpansion(t *testing.T) {
	ctx := context.Background()
	everything := &registry.ResourceRegistry{ObjectMeta: metav1.ObjectMeta{Name: "everything", Generation: 2},
		Spec: registry.ResourceRegistrySpec{ResourceSelectors: []registry.ResourceSelector{{APIVersion: "*", Kind: "*"}}}}
	s := &syncChecker{}
	ends := map[string]uint64{"member1": 7}
	for _, tt := range []struct {
		name       string
		registries map[string]int64
		want       bool
	}{
		{"not reported", nil, false},
		{"an older generation", map[string]int64{"everything": 1}, false},
		{"another registry's", map[string]int64{"other": 2}, false},
		{"this generation", map[string]int64{"everything": 2}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &inventory.Cluster{Name: "member1", Ready: true, Registries: tt.registries,
				Resources: []inventory.ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Synced: true}}}
			ok, why, err := s.clusterSynced(ctx, []*registry.ResourceRegistry{everything}, rec, ends, ends)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.want || (!ok && !strings.Contains(why, "not yet expanded")) {
				t.Fatalf("synced %v (%q), want %v", ok, why, tt.want)
			}
		})
	}
}
