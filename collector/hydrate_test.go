package collector

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestHydrateDeletesItsConsumer: hydrate reads the stream through an
// ordered consumer and deletes it when done, whether it succeeded or not,
// so no idle consumer is left on the hub for nats.go's 5-minute inactive
// threshold after every (re)sync.
func TestHydrateDeletesItsConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, js := natstest.Start(t, 0)
	if _, _, err := stream.EnsureStream(ctx, js, "m1", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"in", "out"} {
		ev := &fleetviewv1.ResourceEvent{Cluster: "m1", Gvr: stream.ProtoGVR(configMapsGVR), Kind: "ConfigMap", Uid: "u-" + ns,
			Namespace: ns, Name: "a", ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Namespaced: true, Object: []byte(`{}`)}
		msg, err := stream.ObjectMsg(ev, stream.ObjectMsgOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// failPublish makes the tombstone of the object out of scope fail,
		// so hydrate ends with an error after reading the stream.
		failPublish bool
	}{
		{"hydrated", false},
		{"failed after reading", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{max: 4 << 20, fail: tc.failPublish}
			s := newResourceSync(resourceSyncConfig{
				cluster: "m1", w: want{gvr: configMapsGVR, kind: "ConfigMap", namespaced: true, namespaces: []string{"in"}},
				js: js, pub: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ttl: stream.DefaultTombstoneTTL, m: &metrics{},
			})
			err := s.hydrate(ctx)
			if tc.failPublish != (err != nil) {
				t.Fatalf("hydrate: %v", err)
			}
			if !tc.failPublish {
				if s.ledger.size() != 1 {
					t.Fatalf("ledger holds %d objects, want 1", s.ledger.size())
				}
				expect(t, "out of scope", rec.take(), "DELETE out/a u-out 1")
			}
			// nats.go deletes the ordered consumer's earlier incarnations
			// (one per Fetch) in goroutines of its own: wait for those,
			// while the one hydrate read through would stay 5 minutes.
			var left []string
			deadline := time.Now().Add(5 * time.Second)
			for {
				if left = consumers(ctx, t, js, stream.StreamName("m1")); len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("consumers left on the stream: %v", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// consumers names the consumers on the stream.
func consumers(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) []string {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	names := st.ConsumerNames(ctx)
	var out []string
	for n := range names.Name() {
		out = append(out, n)
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		t.Fatal(err)
	}
	return out
}
