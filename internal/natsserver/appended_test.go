package natsserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/stream"
)

// A cluster stream's republished headers (stream.Appended, what wakes the
// hub's materializers) reach the hub account only: a collector may not
// subscribe to them, and its account imports none, so it learns nothing
// of another cluster's activity.
func TestAppendedStaysInTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := startIsolation(t, ctx)
	hub, err := f.hjs.Conn().SubscribeSync(stream.AllAppended)
	if err != nil {
		t.Fatal(err)
	}
	spy, err := f.a.SubscribeSync(stream.AllAppended)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("denied: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("edge-a's subscription to every cluster's republish was not refused")
	}
	if _, err := f.bjs.Publish(ctx, bSubject, []byte("b1")); err != nil {
		t.Fatal(err)
	}
	m, err := hub.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := stream.ClusterFromAppended(m.Subject); !ok || c != "edge-b" {
		t.Fatalf("hub got %s", m.Subject)
	}
	// The hub saw it: had edge-a's subscription been live, the server
	// would have sent it the same message before.
	if err := f.a.FlushWithContext(ctx); err != nil && !errors.Is(err, nats.ErrBadSubscription) {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("edge-a received %s", m.Subject)
	}
}
