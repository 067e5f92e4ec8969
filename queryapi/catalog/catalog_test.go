package catalog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The catalog follows the buckets on a real NATS server: records and
// registries written after it started change the snapshot without any
// read of its own, a forged record marks only its cluster, and Run ends
// with its context.
func TestCatalogFollowsTheBuckets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv, regs := buckets(ctx, t)
	c, err := New(Config{Inventory: inv, Registries: regs})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := c.WaitLoaded(wctx); err != nil {
		t.Fatal(err)
	}
	until := func(what string, ok func(*Snapshot) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(c.Current()) {
			if time.Now().After(deadline) {
				t.Fatalf("catalog never %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, r := range []*inventory.Cluster{rec("member1", rs(pods, "Pod", true)), rec("member2", rs(pods, "Pod", true))} {
		if err := inventory.Put(ctx, inv, r); err != nil {
			t.Fatal(err)
		}
	}
	until("listed both clusters", func(s *Snapshot) bool { return len(s.ClusterNames()) == 2 })
	if _, ok := c.Current().Resource(pods); ok {
		t.Fatal("pods served before any registry selects them")
	}
	reg := &registry.ResourceRegistry{}
	reg.APIVersion, reg.Kind, reg.Name = "fleetview.io/v1alpha1", "ResourceRegistry", "pods"
	reg.Spec.ResourceSelectors = []registry.ResourceSelector{{APIVersion: "v1", Kind: "Pod"}}
	if _, err := regs.Apply(ctx, reg); err != nil {
		t.Fatal(err)
	}
	until("served pods from both", func(s *Snapshot) bool {
		r, ok := s.Resource(pods)
		return ok && len(r.Clusters) == 2
	})
	// A heartbeat (same claims, new record) keeps the resolution and
	// shows the new record.
	before := c.Current()
	hb := rec("member2", rs(pods, "Pod", true))
	hb.Message = "heartbeat"
	if err := inventory.Put(ctx, inv, hb); err != nil {
		t.Fatal(err)
	}
	until("took the heartbeat", func(s *Snapshot) bool { r, _ := s.Record("member2"); return r.Message == "heartbeat" })
	if r, _ := c.Current().Resource(pods); r != func() *Resource { r, _ := before.Resource(pods); return r }() {
		t.Fatal("a heartbeat resolved the catalog again")
	}
	if err := inventory.Put(ctx, inv, rec("member1", rs(pods, "Secret", false, "svc"))); err != nil {
		t.Fatal(err)
	}
	until("marked member1", func(s *Snapshot) bool { return s.Mark("member1", pods) != "" })
	r, _ := c.Current().Resource(pods)
	if r.Kind != "Pod" || !r.Namespaced || len(r.Clusters) != 1 || r.Clusters[0] != "member2" {
		t.Fatalf("after the forged record pods = %+v", r)
	}
	if err := inv.Delete(ctx, "member1"); err != nil {
		t.Fatal(err)
	}
	until("dropped member1", func(s *Snapshot) bool { _, ok := s.Cluster("member1"); return !ok })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// OnLabels hears each change of a cluster's labels, and the loss of its
// valid record, once: a heartbeat with the same labels is no call, since
// member RBAC decides a member again at each call.
func TestCatalogTellsLabelChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv, regs := buckets(ctx, t)
	calls := make(chan string, 16)
	c, err := New(Config{Inventory: inv, Registries: regs, OnLabels: func(cluster string, labels map[string]string, present bool) {
		calls <- fmt.Sprintf("%s %v %v", cluster, labels, present)
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	put := func(r *inventory.Cluster) {
		t.Helper()
		if err := inventory.Put(ctx, inv, r); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want string) {
		t.Helper()
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("OnLabels(%s), want (%s)", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no OnLabels(%s) within 10s", want)
		}
	}
	corp := rec("member1", rs(pods, "Pod", true))
	corp.Labels = map[string]string{"idp": "corp"}
	put(corp)
	next("member1 map[idp:corp] true")
	corp.Message = "heartbeat"
	put(corp) // the same labels: no call
	lab := rec("member1", rs(pods, "Pod", true))
	lab.Labels = map[string]string{"idp": "corp", "env": "lab"}
	put(lab)
	next("member1 map[env:lab idp:corp] true")
	if _, err := inv.Put(ctx, "member1", []byte(`{"name":"member1","authorization":"forged"}`)); err != nil {
		t.Fatal(err)
	}
	next("member1 map[] false")
	if _, err := inv.Put(ctx, "member2", []byte(`{"name":"member2","labels":{"bad key!":"x"}}`)); err != nil {
		t.Fatal(err)
	}
	put(rec("member3", rs(pods, "Pod", true)))
	next("member3 map[] true") // member2 never had a valid record: no call for it
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// buckets starts a real NATS server and opens the inventory and registry
// buckets a catalog follows.
func buckets(ctx context.Context, t *testing.T) (jetstream.KeyValue, *regstore.Store) {
	t.Helper()
	_, _, js := natstest.Start(t, -1)
	inv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return inv, regs
}
