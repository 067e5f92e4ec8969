package stream_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
)

func TestClusterFromAppended(t *testing.T) {
	for _, tc := range []struct {
		subject, cluster string
		ok               bool
	}{
		{"fv.appended.edge-a.fv.obj.edge-a.core.v1.pods.u1", "edge-a", true},
		{"fv.appended.edge-a.fv.ctl.edge-a.core.v1.pods", "edge-a", true},
		{"fv.appended.edge-a", "", false},
		{"fv.appended.Edge_A.fv.obj.x", "", false},
		{"fv.obj.edge-a.core.v1.pods.u1", "", false},
	} {
		t.Run(tc.subject, func(t *testing.T) {
			c, ok := stream.ClusterFromAppended(tc.subject)
			if c != tc.cluster || ok != tc.ok {
				t.Fatalf("ClusterFromAppended = %q %v, want %q %v", c, ok, tc.cluster, tc.ok)
			}
		})
	}
}

// A cluster stream, made anew or one made before the republish existed
// (EnsureStream updates it), tells AllAppended of every message it
// stores: its cluster in the subject, its stream and sequence in the
// headers, and no payload.
func TestStreamRepublishesHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, nc, js := natstest.Start(t, -1)
	old := stream.StreamConfig("edge-b", 1, 0)
	old.RePublish = nil
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"edge-a", "edge-b"} {
		if _, err := stream.EnsureStream(ctx, js, c, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := nc.SubscribeSync(stream.AllAppended)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for i, c := range []string{"edge-a", "edge-b", "edge-a"} {
		if _, err := js.Publish(ctx, stream.ObjectSubject(c, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "u"+strconv.Itoa(i)), []byte("payload")); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []struct {
		cluster string
		seq     string
	}{{"edge-a", "1"}, {"edge-b", "1"}, {"edge-a", "2"}} {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("republish %d: %v", i, err)
		}
		c, ok := stream.ClusterFromAppended(m.Subject)
		if !ok || c != want.cluster || m.Header.Get(jetstream.StreamHeader) != stream.StreamName(want.cluster) ||
			m.Header.Get(jetstream.SequenceHeader) != want.seq || len(m.Data) != 0 {
			t.Fatalf("republish %d: subject %s headers %v data %q, want cluster %s sequence %s", i, m.Subject, m.Header, m.Data, want.cluster, want.seq)
		}
	}
}
