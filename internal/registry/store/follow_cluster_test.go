package store

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
)

// TestFollowerInANATSCluster: with three hubs' embedded servers in one
// JetStream cluster and per-cluster accounts, only the registries stream's
// leader republishes; a collector's follower connected to each member gets
// every change, and after the leader is shut down the new leader's
// republish reaches the followers (the one whose server died reconnects
// and reads the registries again).
func TestFollowerInANATSCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const hubPass, aPass = "hub-password-0123456789", "edge-a-password-0123456789"
	var routes []*url.URL
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats", Host: l.Addr().String()})
		_ = l.Close()
	}
	srvs := make([]*natsserver.Server, 3)
	errs := make(chan error, 3)
	for i := range srvs {
		go func() {
			s, err := natsserver.Start(natsserver.Options{StoreDir: t.TempDir(), Port: -1, ServerName: fmt.Sprintf("m%d", i),
				HubPassword: hubPass, Clusters: []natsserver.ClusterUser{{Cluster: "edge-a", Password: aPass}},
				Cluster: natsserver.ClusterOptions{Name: "fv", Host: "127.0.0.1", Port: ports[i], Routes: routes, Password: "route-secret-0123"}})
			srvs[i] = s
			errs <- err
		}()
	}
	for range srvs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range srvs {
		t.Cleanup(s.Shutdown)
	}
	// urls lists every member, first the i-th (tried in that order).
	urls := func(first int) string {
		u := []string{srvs[first].ClientURL()}
		for i, s := range srvs {
			if i != first {
				u = append(u, s.ClientURL())
			}
		}
		return strings.Join(u, ",")
	}
	hub, err := nats.Connect(urls(0), nats.UserInfo(natsserver.HubUser, hubPass), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, _ := jetstream.New(hub)
	// retry bounds each attempt: JetStream drops a request it has no
	// leader for (the meta leader is elected after the members connect,
	// and again after one leaves).
	retry := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		var err error
		for ctx.Err() == nil {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = f(actx)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: %v", what, err)
	}
	var hs *Store
	retry("open the buckets R3", func(ctx context.Context) (err error) { hs, err = Open(ctx, hjs, 3); return err })
	apply := func(r *registry.ResourceRegistry) {
		t.Helper()
		retry("apply "+r.Name, func(ctx context.Context) error { _, err := hs.Apply(ctx, r); return err })
	}
	apply(named(t, "a", 1))

	followers := make([]*Follower, 3)
	for i := range followers {
		nc, err := nats.Connect(urls(i), nats.UserInfo("edge-a", aPass), nats.CustomInboxPrefix(natsserver.InboxPrefix("edge-a")),
			nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.NewWithAPIPrefix(nc, natsserver.APIPrefix)
		s, err := Bind(ctx, js, "edge-a")
		if err != nil {
			t.Fatal(err)
		}
		// Errors are expected while the leader is shut down below.
		followers[i] = s.Follow(FollowConfig{Check: 50 * time.Millisecond,
			OnSnapshot: func(r string) { t.Logf("follower %d (m%d first): snapshot for %s", i, i, r) },
			OnError:    func(err error) { t.Logf("follower %d: %v", i, err) }})
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = followers[i].Run(fctx)
		}()
		defer func() {
			stop()
			<-done
		}()
	}
	// A follower whose server died reads the registries again once a
	// new leader is elected, with its snapshots' backoff.
	every := func(want string) {
		t.Helper()
		for _, f := range followers {
			untilWithin(t, f, want, 30*time.Second)
		}
	}
	every("a:member1")
	apply(named(t, "a", 2))
	apply(named(t, "b", 1))
	every("a:member2 b:member1")

	st, err := hjs.Stream(ctx, natsnames.KVStream(natsnames.RegistryBucket))
	if err != nil {
		t.Fatal(err)
	}
	leader := st.CachedInfo().Cluster.Leader
	t.Logf("registries leader %s", leader)
	for i, s := range srvs {
		if fmt.Sprintf("m%d", i) == leader {
			s.Shutdown()
		}
	}
	apply(named(t, "a", 3))
	every("a:member3 b:member1")
}
