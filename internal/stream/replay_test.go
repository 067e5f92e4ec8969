package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// TestReplay reads a resource back from a real cluster stream, as a resumed
// watch and the mover do: only the resource's subjects, the last message of
// each, in stream order, bounded by from and to, undecodable messages passed
// over, and the consumer gone afterwards however the replay ended.
func TestReplay(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	const cluster = "r"
	if _, _, err := stream.EnsureStream(ctx, js, cluster, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deploys := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	publish := func(subject string, data []byte) uint64 {
		t.Helper()
		ack, err := js.Publish(ctx, subject, data)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	object := func(gvr schema.GroupVersionResource, uid string, typ fleetviewv1.EventType) uint64 {
		t.Helper()
		ev := &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(gvr), Uid: uid, Name: uid, Namespace: "ns", ResourceVersion: "1", Type: typ}
		if typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			ev.Object = []byte(`{"metadata":{"name":"` + uid + `"}}`)
		}
		data, err := stream.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return publish(stream.ObjectSubject(cluster, gvr, uid), data)
	}
	upsert, del := fleetviewv1.EventType_EVENT_TYPE_UPSERT, fleetviewv1.EventType_EVENT_TYPE_DELETE
	object(pods, "u1", upsert)                                                        // 1: replaced by 4
	object(pods, "u2", upsert)                                                        // 2: replaced by 5
	object(deploys, "d1", upsert)                                                     // 3: another resource
	u1 := object(pods, "u1", upsert)                                                  // 4
	u2 := object(pods, "u2", del)                                                     // 5: a tombstone
	bad := publish(stream.ObjectSubject(cluster, pods, "u3"), []byte("not an event")) // 6: undecodable
	syncData, err := stream.Encode(&fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(pods), Type: fleetviewv1.EventType_EVENT_TYPE_SYNCED})
	if err != nil {
		t.Fatal(err)
	}
	synced := publish(stream.ControlSubject(cluster, pods), syncData) // 7
	u4 := object(pods, "u4", upsert)                                  // 8
	if u4 != 8 {
		t.Fatalf("the stream holds other messages: last sequence %d", u4)
	}

	type got struct {
		seq uint64
		uid string
		typ fleetviewv1.EventType
	}
	replay := func(ctx context.Context, from, to uint64, fn func(got) error) ([]got, error) {
		var out []got
		err := stream.Replay(ctx, js, cluster, stream.ResourceSubjects(cluster, pods), from, to, func(seq uint64, ev *fleetviewv1.ResourceEvent) error {
			if stream.GVR(ev.GetGvr()) != pods {
				t.Errorf("seq %d: an event of %v", seq, stream.GVR(ev.GetGvr()))
			}
			g := got{seq, ev.GetUid(), ev.GetType()}
			out = append(out, g)
			if fn != nil {
				return fn(g)
			}
			return nil
		})
		return out, err
	}
	for _, tc := range []struct {
		name     string
		from, to uint64
		want     []got
	}{
		{"the whole state", 0, u4, []got{{u1, "u1", upsert}, {u2, "u2", del}, {synced, "", fleetviewv1.EventType_EVENT_TYPE_SYNCED}, {u4, "u4", upsert}}},
		{"the whole state through a sequence", 0, u1, []got{{u1, "u1", upsert}}},
		{"a range: after from, through to, nothing past it", u1, synced, []got{{u2, "u2", del}, {synced, "", fleetviewv1.EventType_EVENT_TYPE_SYNCED}}},
		{"a range holding only an undecodable message", u2, bad, nil},
		{"a range past the stream's end", u4, u4 + 10, nil},
		{"to not after from", u4, u1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := replay(ctx, tc.from, tc.to, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out, tc.want) {
				t.Fatalf("replay (%d, %d] = %v, want %v", tc.from, tc.to, out, tc.want)
			}
		})
	}

	t.Run("an error of fn ends the replay, returned as is", func(t *testing.T) {
		stop := errors.New("stop")
		out, err := replay(ctx, 0, u4, func(got) error { return stop })
		if err != stop || len(out) != 1 {
			t.Fatalf("err %v after %v, want %v after one event", err, out, stop)
		}
	})
	t.Run("a cancelled context ends the replay", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		out, err := replay(cctx, 0, u4, func(got) error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) || len(out) == 4 {
			t.Fatalf("err %v after %v, want context.Canceled before the end", err, out)
		}
	})
	t.Run("a missing stream", func(t *testing.T) {
		err := stream.Replay(ctx, js, "none", stream.ResourceSubjects("none", pods), 0, 10, func(uint64, *fleetviewv1.ResourceEvent) error { return nil })
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("err %v, want ErrStreamNotFound", err)
		}
	})
	t.Run("more than one fetch", func(t *testing.T) {
		cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		var want []uint64
		for i := range 1234 {
			want = append(want, object(cms, fmt.Sprintf("cm-%d", i), upsert))
		}
		var seqs []uint64
		err := stream.Replay(ctx, js, cluster, stream.ResourceSubjects(cluster, cms), 0, want[len(want)-1], func(seq uint64, ev *fleetviewv1.ResourceEvent) error {
			seqs = append(seqs, seq)
			return nil
		})
		if err != nil || !slices.Equal(seqs, want) {
			t.Fatalf("%d events (%v), want %d in stream order", len(seqs), err, len(want))
		}
	})

	// Every replay above, cut short or not, deleted its consumer.
	st, err := js.Stream(ctx, stream.StreamName(cluster))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Fatalf("%d consumers left on the stream", n)
	}
}
