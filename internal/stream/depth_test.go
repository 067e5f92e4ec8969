package stream_test

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestStreamDepth: the hub raises a collector-made stream's messages per
// object (EnsureDepth) so that back-to-back changes of one object all stay
// until read, a collector's EnsureStream with depth 0 keeps what the hub
// set, Replay gives the current state from 0 and every kept change after a
// sequence, and lowering the depth keeps each object's last message.
func TestStreamDepth(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	const cluster = "d"
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	publish := func(uid, rv string) uint64 {
		t.Helper()
		data, err := stream.Encode(&fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(pods), Uid: uid, Name: uid, Namespace: "ns",
			ResourceVersion: rv, Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, stream.ObjectSubject(cluster, pods, uid), data)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	depth := func() int64 {
		t.Helper()
		st, err := js.Stream(ctx, stream.StreamName(cluster))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxMsgsPerSubject
	}
	replay := func(from, to uint64) []string {
		t.Helper()
		var out []string
		if err := stream.Replay(ctx, js, cluster, stream.ResourceSubjects(cluster, pods), from, to, func(seq uint64, ev *fleetviewv1.ResourceEvent) error {
			out = append(out, ev.GetUid()+"@"+ev.GetResourceVersion())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// A collector creates the stream: one message per object.
	if _, _, err := stream.EnsureStream(ctx, js, cluster, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if d := depth(); d != 1 {
		t.Fatalf("a new stream keeps %d messages per object, want 1", d)
	}
	publish("u1", "1")
	publish("u1", "2") // replaces 1: the depth is still 1
	for _, tc := range []struct {
		depth   int
		changed bool
	}{{4, true}, {4, false}} {
		changed, err := stream.EnsureDepth(ctx, js, cluster, tc.depth)
		if err != nil || changed != tc.changed || depth() != int64(tc.depth) {
			t.Fatalf("EnsureDepth(%d) = %v, %v (depth %d), want changed %v", tc.depth, changed, err, depth(), tc.changed)
		}
	}
	first := publish("u1", "3")
	publish("u2", "1")
	last := publish("u1", "4")
	// The collector restarts: depth 0 keeps the hub's.
	if _, _, err := stream.EnsureStream(ctx, js, cluster, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if d := depth(); d != 4 {
		t.Fatalf("a collector's EnsureStream left %d messages per object, want the hub's 4", d)
	}
	for _, tc := range []struct {
		name     string
		from, to uint64
		want     []string
	}{
		{"the current state from 0", 0, last, []string{"u2@1", "u1@4"}},
		{"every kept change after a sequence", 1, last, []string{"u1@2", "u1@3", "u2@1", "u1@4"}},
		{"every change after the first kept", first - 1, last, []string{"u1@3", "u2@1", "u1@4"}},
	} {
		if got := replay(tc.from, tc.to); !slices.Equal(got, tc.want) {
			t.Errorf("%s: replay (%d, %d] = %v, want %v", tc.name, tc.from, tc.to, got, tc.want)
		}
	}
	// History turned off: the hub lowers the depth; each object's last
	// message stays.
	if changed, err := stream.EnsureDepth(ctx, js, cluster, 1); err != nil || !changed {
		t.Fatalf("EnsureDepth(1) = %v, %v", changed, err)
	}
	if got, want := replay(1, last), []string{"u2@1", "u1@4"}; !slices.Equal(got, want) {
		t.Fatalf("after lowering the depth: %v, want %v", got, want)
	}
}
