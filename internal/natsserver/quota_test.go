package natsserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// refusals counts Options.OnRefused calls.
type refusals struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (r *refusals) add(cluster, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[[2]string{cluster, reason}]++
}

func (r *refusals) get(cluster, reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[[2]string{cluster, reason}]
}

// Bounds the floods may cost the hub process, with every flood's
// survivors still held (edge-a's 8 + 64 consumers): 1,000 consumers cost
// it about 4,000 goroutines and 232 MB before the quotas. The heap left
// after every flood varies from run to run (28 to 68 MiB seen, most of it
// the server's buffers after the guard-queue flood pushed 80 MiB through),
// hence twice the most seen.
const (
	floodGoroutines = 300
	floodHeapBytes  = 128 << 20
)

// quotaFloods: edge-a's credential floods every shared resource it may
// touch (consumers on the registries and its own stream, oversized
// consumer requests, status keys and values, inventory values,
// connections, subscriptions, the guard's queue). Each flood is refused
// beyond edge-a's quota as natsnames.ErrHubQuota (or the server's own limit),
// edge-b's collector and the hub's registry reads keep working, and the
// hub's goroutines and heap stay within the stated bounds.
func quotaFloods(t *testing.T, ctx context.Context, f *isolation, bCons string) {
	q := DefaultQuotas()
	aPrefix := natsnames.ConsumerPrefix("edge-a")
	runtime.GC()
	g0 := runtime.NumGoroutine()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	held := func(streamName string) int {
		n := 0
		st, err := f.hjs.Stream(ctx, streamName)
		if err != nil {
			t.Fatal(err)
		}
		names := st.ConsumerNames(ctx)
		for name := range names.Name() {
			if strings.HasPrefix(name, aPrefix) {
				n++
			}
		}
		if err := names.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	othersWork := func(when string) {
		t.Helper()
		// edge-b's collector follows the registries.
		oc, err := f.bjs.OrderedConsumer(ctx, regStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"$KV.fv_registries.>"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
			NamePrefix: natsnames.ConsumerNamePrefix("edge-b")})
		if err != nil {
			t.Fatalf("%s: edge-b cannot follow the registries: %v", when, err)
		}
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil || string(m.Data()) != `{"name":"pods"}` {
			t.Fatalf("%s: edge-b reads the registries: %v", when, err)
		}
		if err := f.bjs.DeleteConsumer(ctx, regStream, oc.CachedInfo().Name); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		// The hub's own registry reads (regstore watches the bucket).
		regs, err := f.hjs.KeyValue(ctx, natsnames.RegistryBucket)
		if err != nil {
			t.Fatal(err)
		}
		w, err := regs.WatchAll(ctx)
		if err != nil {
			t.Fatalf("%s: the hub cannot watch the registries: %v", when, err)
		}
		select {
		case e := <-w.Updates():
			if e == nil || e.Key() != "pods" {
				t.Fatalf("%s: the hub's registry watch: %v", when, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the hub's registry watch delivered nothing", when)
		}
		_ = w.Stop()
		// edge-b writes its status and inventory.
		for bucket, key := range map[string]string{natsnames.RegistryStatusBucket: "edge-b.pods", natsnames.ClusterBucket: "edge-b"} {
			kv, err := f.bjs.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatalf("%s: edge-b binds %s: %v", when, bucket, err)
			}
			if _, err := kv.Put(ctx, key, []byte(`{"b":2}`)); err != nil {
				t.Fatalf("%s: edge-b writes %s: %v", when, key, err)
			}
		}
	}
	wantQuota := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: accepted", what)
		}
		if natsnames.HubQuotaError(err) == nil {
			t.Fatalf("%s: refused, but not as the hub's quota: %v", what, err)
		}
	}

	t.Run("consumers", func(t *testing.T) {
		for _, tc := range []struct {
			stream string
			n, max int
		}{{regStream, 1000, q.RegistryConsumers}, {stream.StreamName("edge-a"), 200, q.StreamConsumers}} {
			start := time.Now()
			accepted := 0
			var refusal error
			for i := range tc.n {
				name := fmt.Sprintf("%sflood%d", aPrefix, i)
				err := apiRequest(ctx, f.a, "CONSUMER.CREATE."+tc.stream+"."+name, consumerReq(tc.stream, server.ActionCreate, pullCfg(name)))
				if err == nil {
					accepted++
					continue
				}
				wantQuota(fmt.Sprintf("consumer %d on %s", i, tc.stream), err)
				refusal = err
			}
			if h := held(tc.stream); h > tc.max || accepted > tc.max || accepted == 0 {
				t.Fatalf("%s: %d of %d creates accepted, %d held; quota %d", tc.stream, accepted, tc.n, h, tc.max)
			}
			t.Logf("%s: %d of %d consumer creates accepted in %s; refusal: %v", tc.stream, accepted, tc.n, time.Since(start).Round(time.Millisecond), refusal)
		}
		if n := f.refused.get("edge-a", ReasonConsumers); n < 1000-q.RegistryConsumers {
			t.Errorf("%d consumer refusals counted", n)
		}
		othersWork("after the consumer flood")
		runtime.GC()
		if d := runtime.NumGoroutine() - g0; d > floodGoroutines {
			t.Errorf("the consumer flood cost %d goroutines (bound %d)", d, floodGoroutines)
		}
	})

	// The registries bucket's counts follow the server's advisories
	// (sharedconsumers.go), not a listing per create: a consumer deleted
	// frees its place, and only its own cluster's.
	t.Run("a deleted registry consumer frees its place", func(t *testing.T) {
		rs, err := f.hjs.Stream(ctx, regStream)
		if err != nil {
			t.Fatal(err)
		}
		var victim string
		for n := range rs.ConsumerNames(ctx).Name() {
			if victim == "" && strings.HasPrefix(n, aPrefix) {
				victim = n
			}
		}
		if victim == "" {
			t.Fatalf("edge-a holds no consumer on %s after the flood", regStream)
		}
		next := aPrefix + "after-delete"
		if err := apiRequest(ctx, f.a, "CONSUMER.CREATE."+regStream+"."+next, consumerReq(regStream, server.ActionCreate, pullCfg(next))); err == nil {
			t.Fatalf("edge-a at its quota created %s", next)
		}
		if err := f.hjs.DeleteConsumer(ctx, regStream, victim); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := apiRequest(ctx, f.a, "CONSUMER.CREATE."+regStream+"."+next, consumerReq(regStream, server.ActionCreate, pullCfg(next)))
			if err == nil {
				break
			}
			wantQuota("the create after a delete", err)
			if time.Now().After(deadline) {
				t.Fatalf("a deleted consumer's place was not freed in 10s: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // polling for the advisory, bounded by the deadline
		}
		if err := apiRequest(ctx, f.a, "CONSUMER.CREATE."+regStream+"."+aPrefix+"one-more", consumerReq(regStream, server.ActionCreate, pullCfg(aPrefix+"one-more"))); err == nil {
			t.Fatalf("edge-a got two places for one deleted consumer")
		}
		othersWork("after edge-a's delete and create")
	})

	t.Run("oversized consumer request", func(t *testing.T) {
		name := aPrefix + "big"
		cfg := pullCfg(name)
		cfg.Description = strings.Repeat("x", q.ConsumerRequestBytes)
		err := apiRequest(ctx, f.a, "CONSUMER.CREATE.FV_edge_a."+name, consumerReq("FV_edge_a", server.ActionCreate, cfg))
		wantQuota("consumer request beyond its bound", err)
		if f.refused.get("edge-a", ReasonRequestSize) != 1 {
			t.Errorf("request size refusal not counted")
		}
	})

	t.Run("status keys and values", func(t *testing.T) {
		kv, err := f.ajs.KeyValue(ctx, natsnames.RegistryStatusBucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.hjs.Stream(ctx, statusStream)
		if err != nil {
			t.Fatal(err)
		}
		before, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			_, err := kv.Put(ctx, fmt.Sprintf("edge-a.forged%d", i), []byte(`{"conditions":[]}`))
			wantQuota(fmt.Sprintf("status key %d for no registry", i), err)
		}
		for _, tc := range []struct {
			name, key string
			size      int
		}{
			{"status key below a registry", "edge-a.pods.x", 10},
			{"status value beyond its bound", "edge-a.pods", q.StatusValueBytes + 1},
			{"status value of a MiB", "edge-a.pods", 1 << 20},
		} {
			_, err := kv.Put(ctx, tc.key, bytes.Repeat([]byte("x"), tc.size))
			wantQuota(tc.name, err)
		}
		if _, err := kv.Put(ctx, "edge-a.pods", bytes.Repeat([]byte("x"), q.StatusValueBytes)); err != nil {
			t.Fatalf("a status value at its bound: %v", err)
		}
		// A registry's name is a DNS subdomain: its status key holds dots.
		regs, err := f.hjs.KeyValue(ctx, natsnames.RegistryBucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := regs.Put(ctx, "team.pods", []byte(`{"name":"team.pods"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "edge-a.team.pods", []byte(`{"conditions":[]}`)); err != nil {
			t.Fatalf("the status of a registry named with dots: %v", err)
		}
		// Its own key of a registry removed since: deleting it stays
		// allowed, writing it does not.
		if err := regs.Delete(ctx, "team.pods"); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "edge-a.team.pods", []byte(`{"conditions":[{}]}`)); natsnames.HubQuotaError(err) == nil {
			t.Fatalf("the status of a removed registry: %v", err)
		}
		if err := kv.Delete(ctx, "edge-a.team.pods"); err != nil {
			t.Fatalf("deleting its status of a removed registry: %v", err)
		}
		after, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if grew := int64(after.State.Bytes) - int64(before.State.Bytes); grew > int64(q.StatusValueBytes)+8192 {
			t.Fatalf("the status bucket grew by %d bytes", grew)
		}
		if n := f.refused.get("edge-a", ReasonStatusKey); n < 1002 {
			t.Errorf("%d status key refusals counted", n)
		}
	})

	t.Run("inventory value", func(t *testing.T) {
		kv, err := f.ajs.KeyValue(ctx, natsnames.ClusterBucket)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kv.Put(ctx, "edge-a", bytes.Repeat([]byte("x"), q.InventoryValueBytes+1))
		wantQuota("inventory record beyond its bound", err)
		if _, err := kv.Put(ctx, "edge-a", []byte(`{"name":"edge-a"}`)); err != nil {
			t.Fatalf("edge-a's own inventory record: %v", err)
		}
	})

	t.Run("connections", func(t *testing.T) {
		ok, refused := 0, 0
		var last error
		for range 50 {
			nc, err := nats.Connect(f.srv.ClientURL(), nats.UserInfo("edge-a", aPass), nats.NoReconnect())
			if err != nil {
				refused++
				last = err
				continue
			}
			ok++
			defer nc.Close()
		}
		// f.a holds one of edge-a's connections.
		if ok+1 > q.Connections || refused == 0 {
			t.Fatalf("%d of 50 connections admitted beside edge-a's collector; quota %d", ok, q.Connections)
		}
		if !errors.Is(last, nats.ErrMaxAccountConnectionsExceeded) && !strings.Contains(strings.ToLower(fmt.Sprint(last)), "maximum account active connections") {
			t.Errorf("refusal: %v", last)
		}
		nb, err := nats.Connect(f.srv.ClientURL(), nats.UserInfo("edge-b", bPass), nats.CustomInboxPrefix(InboxPrefix("edge-b")))
		if err != nil {
			t.Fatalf("edge-b's next connection: %v", err)
		}
		nb.Close()
	})

	t.Run("subscriptions", func(t *testing.T) {
		tooMany := make(chan struct{}, 1)
		connect := func() (*nats.Conn, error) {
			return nats.Connect(f.srv.ClientURL(), nats.UserInfo("edge-a", aPass), nats.NoReconnect(),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
					if errors.Is(err, nats.ErrMaxSubscriptionsExceeded) {
						select {
						case tooMany <- struct{}{}:
						default:
						}
					}
				}))
		}
		// The connections subtest's clients are closed, but the server
		// may not have counted them out of edge-a's account yet.
		nc, err := connect()
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			if !strings.Contains(strings.ToLower(err.Error()), "maximum account active connections") {
				break
			}
			<-time.After(20 * time.Millisecond) // poll the condition
			nc, err = connect()
		}
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		for i := range 2 * q.Subscriptions {
			if _, err := nc.SubscribeSync(fmt.Sprintf("%s.flood%d", InboxPrefix("edge-a"), i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tooMany:
		case <-time.After(5 * time.Second):
			t.Fatal("no subscription refused")
		}
		cz, err := f.srv.ns.Connz(&server.ConnzOptions{Account: ClusterAccount("edge-a")})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.NumSubs > uint32(q.Subscriptions) {
				t.Fatalf("a connection of edge-a holds %d subscriptions; quota %d", c.NumSubs, q.Subscriptions)
			}
		}
	})

	t.Run("guard queue", func(t *testing.T) {
		// Requests the guard must look up the registries for, faster
		// than it answers them, none awaited.
		body := bytes.Repeat([]byte("x"), 4096)
		for i := range 20000 {
			if err := f.a.PublishRequest(fmt.Sprintf("%s.$KV.%s.edge-a.q%d", APIPrefix, natsnames.RegistryStatusBucket, i), InboxPrefix("edge-a")+".none", body); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.a.Flush(); err != nil {
			t.Fatal(err)
		}
		// Drained when edge-a's next request is answered (one queue,
		// in order); a dropped probe is asked again.
		for {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := apiRequest(c, f.a, "STREAM.INFO.FV_edge_a", nil)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
		}
		t.Logf("guard queue flood: %d dropped, %d refused", f.refused.get("edge-a", ReasonQueue), f.refused.get("edge-a", ReasonStatusKey))
	})

	othersWork("after every flood")
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	if d := int64(m1.HeapInuse) - int64(m0.HeapInuse); d > floodHeapBytes {
		t.Errorf("the floods cost %d MiB of heap (bound %d MiB)", d>>20, floodHeapBytes>>20)
	}
	t.Logf("floods cost %d goroutines and %d KiB of heap", runtime.NumGoroutine()-g0, (int64(m1.HeapInuse)-int64(m0.HeapInuse))>>10)
	for _, r := range []string{ReasonForbidden, ReasonConsumers, ReasonStatusKey, ReasonValueSize} {
		if n := f.refused.get("edge-b", r); n != 0 {
			t.Errorf("%d %s refusals counted against edge-b", n, r)
		}
	}
}
