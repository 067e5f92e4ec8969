package collector

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

// TestRegistryChangesNeedNoConsumer: a running collector reconciles each
// registry change from what its follower holds. After its first read of
// the registries it creates no consumer on the shared registries stream,
// however many changes it reconciles (a consumer per collector and per
// change was what made a registry change slow to reach 2,000 collectors;
// measured: docs/benchmarks/fleet.md#a-registry-change-without-a-consumer-per-collector-200-clusters-2026-12-04).
func TestRegistryChangesNeedNoConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, nc, js := natstest.Start(t, 0)
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(name, namespace string) {
		t.Helper()
		ns := ""
		if namespace != "" {
			ns = `,"namespace":"` + namespace + `"`
		}
		r, err := registry.Decode([]byte(`{"apiVersion":"search.karmada.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"` + name + `"},
			"spec":{"targetCluster":{"clusterNames":["m1"]},"resourceSelectors":[{"apiVersion":"v1","kind":"ConfigMap"` + ns + `}]}}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := regs.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	apply("cms", "")

	// Every consumer created on the registries stream, by name.
	var mu sync.Mutex
	var created []string
	sub, err := nc.Subscribe(natsnames.ConsumerAdvisories(natsnames.KVStream(natsnames.RegistryBucket)), func(m *nats.Msg) {
		if ok, name, _ := natsnames.ParseConsumerAdvisory(m.Subject); ok {
			mu.Lock()
			created = append(created, name)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// createdUntil makes a consumer named marker and returns the
	// consumers created before it (advisories arrive in order).
	createdUntil := func(marker string) []string {
		t.Helper()
		if _, err := js.CreateConsumer(ctx, natsnames.KVStream(natsnames.RegistryBucket), jetstream.ConsumerConfig{Name: marker, AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute}); err != nil {
			t.Fatal(err)
		}
		for {
			mu.Lock()
			for i, n := range created {
				if n == marker {
					out := append([]string(nil), created[:i]...)
					created = created[i+1:]
					mu.Unlock()
					return out
				}
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				t.Fatalf("no advisory of %s", marker)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	inv, err := inventory.Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	w, err := inv.Watch(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	// caching waits for a record whose resources are want (resource and
	// namespaces, synced), or none.
	caching := func(want string) {
		t.Helper()
		got := ""
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					continue
				}
				rec := &inventory.Cluster{}
				if err := json.Unmarshal(e.Value(), rec); err != nil {
					t.Fatal(err)
				}
				var rs []string
				for _, r := range rec.Resources {
					if r.Synced {
						rs = append(rs, r.Resource+" "+strings.Join(r.Namespaces, ","))
					}
				}
				if got = strings.Join(rs, ";"); got == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("the inventory record caches %q, want %q", got, want)
			}
		}
	}

	gate := make(chan struct{})
	close(gate)
	defer runFakeCollector(ctx, t, nc, gate)()
	caching("configmaps ")
	if first := createdUntil("marker1"); len(first) == 0 {
		t.Fatal("the collector read the registries without a consumer: the test sees no consumer")
	}

	// Changes the collector must follow: a namespace scope, a second
	// registry, a deletion.
	apply("cms", "ns1")
	caching("configmaps ns1")
	apply("cms2", "ns2")
	caching("configmaps ns1,ns2")
	if err := regs.Delete(ctx, "cms"); err != nil {
		t.Fatal(err)
	}
	caching("configmaps ns2")
	if more := createdUntil("marker2"); len(more) != 0 {
		t.Fatalf("consumers created on the registries stream for the changes: %v", more)
	}
}
