package collector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

// TestFlushReleasesTheHubsRouteCache: after a flush that followed
// publishes, the collector changes its account's subscriptions once (a
// subscription made and dropped), which is what makes the hub's NATS
// server start the connection's cache of routed subjects afresh; with
// nothing published since, a flush or a heartbeat changes nothing.
func TestFlushReleasesTheHubsRouteCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, nc, js := natstest.Start(t, 0)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Cluster: "c1", REST: &rest.Config{Host: "https://127.0.0.1:1"}, NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	changes := func() uint64 {
		t.Helper()
		if err := nc.Flush(); err != nil { // the server has read our SUB/UNSUB
			t.Fatal(err)
		}
		n, err := srv.SubscriptionChanges("$G")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The first publish also subscribes the connection's reply inbox.
	if err := c.publish(ctx, nats.NewMsg("t.first")); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(ctx); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		publish int
		want    uint64
	}{
		{"nothing published", 0, 0},
		{"publishes, then a flush", 3, 2},
		{"a flush with nothing published since", 0, 0},
		{"one publish, then a flush", 1, 2},
	}
	for _, s := range steps {
		before := changes()
		for i := range s.publish {
			if err := c.publish(ctx, nats.NewMsg("t."+string(rune('a'+i)))); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := changes() - before; got != s.want {
			t.Errorf("%s: the account's subscriptions changed %d times, want %d", s.name, got, s.want)
		}
	}
	// What the heartbeat does: a release without a flush.
	before := changes()
	if err := c.publish(ctx, nats.NewMsg("t.z")); err != nil {
		t.Fatal(err)
	}
	c.releaseHubRouteCache()
	if got := changes() - before; got != 2 {
		t.Errorf("a release after a publish changed the subscriptions %d times, want 2", got)
	}
}
