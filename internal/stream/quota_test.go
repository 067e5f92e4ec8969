package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
)

// TestStreamQuota runs a cluster stream with a byte quota on a real
// JetStream server: past the quota a new object is refused with an error
// QuotaError names, while replacing an object with a message no larger
// (an unchanged update, a tombstone) still pass, and nothing stored is
// dropped to make room.
func TestStreamQuota(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	const quota = 64 << 10
	if _, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig("q", 1, quota)); err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("x", 1000))
	subj := func(i int) string { return fmt.Sprintf("fv.obj.q.core.v1.pods.uid-%d", i) }
	stored, refusedAt := 0, -1
	for i := range 200 {
		_, err := js.Publish(ctx, subj(i), payload)
		if err == nil {
			stored++
			continue
		}
		if qe := stream.QuotaError(err); !errors.Is(qe, stream.ErrQuotaExceeded) {
			t.Fatalf("publish %d refused with %v, which QuotaError does not name", i, err)
		}
		refusedAt = i
		break
	}
	if refusedAt < 0 {
		t.Fatalf("%d KiB published into a %d KiB quota without a refusal", 200, quota>>10)
	}
	for _, tc := range []struct {
		name    string
		subject string
		data    []byte
		refused bool
	}{
		{"a new object at the quota", subj(1000), payload, true},
		{"a smaller replacement", subj(0), payload[:900], false},
		{"a replacement that grows the stream", subj(2), append(payload, payload...), true},
		{"a tombstone", subj(1), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := js.Publish(ctx, tc.subject, tc.data)
			if refused := stream.QuotaError(err) != nil; refused != tc.refused || (err != nil && !refused) {
				t.Fatalf("publish: %v, want refused=%v", err, tc.refused)
			}
		})
	}
	st, err := js.Stream(ctx, stream.StreamName("q"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(stored) || info.State.Bytes > quota {
		t.Fatalf("stream holds %d messages, %d bytes; want the %d stored within %d bytes", info.State.Msgs, info.State.Bytes, stored, quota)
	}
	if stream.QuotaError(errors.New("nats: timeout")) != nil || stream.QuotaError(nil) != nil {
		t.Fatal("QuotaError names other errors")
	}
}

// TestEnsureStreamNeverTruncates: a quota below what a stream already
// holds (a lowered flag, an upgrade from streams without one) is raised to
// the stream's size, since JetStream would enforce it by dropping the
// oldest objects' state; a quota above it applies as asked.
func TestEnsureStreamNeverTruncates(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	// A stream as earlier versions created it: Discard Old, no quota.
	old := stream.StreamConfig("t", 1, 0)
	old.Discard = jetstream.DiscardOld
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("x", 1000))
	for i := range 100 {
		if _, err := js.Publish(ctx, fmt.Sprintf("fv.obj.t.core.v1.pods.uid-%d", i), payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		maxBytes int64
		kept     bool
	}{
		{"a quota below the stream's size is raised to it", 10 << 10, true},
		{"a quota above it applies", 1 << 20, false},
		{"no quota", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, kept, err := stream.EnsureStream(ctx, js, "t", 1, tc.maxBytes, 0)
			if err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, stream.StreamName("t"))
			if err != nil {
				t.Fatal(err)
			}
			info := st.CachedInfo()
			if info.State.Msgs != 100 || info.Config.Discard != jetstream.DiscardNew {
				t.Fatalf("the stream holds %d of 100 messages, discard %v", info.State.Msgs, info.Config.Discard)
			}
			if (kept > 0) != tc.kept || tc.kept && info.Config.MaxBytes != kept {
				t.Fatalf("kept %d, MaxBytes %d; want kept=%v", kept, info.Config.MaxBytes, tc.kept)
			}
			if !tc.kept && tc.maxBytes > 0 && info.Config.MaxBytes != tc.maxBytes {
				t.Fatalf("MaxBytes %d, want %d", info.Config.MaxBytes, tc.maxBytes)
			}
		})
	}
}
