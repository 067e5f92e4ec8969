package natsnames_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

func TestValidateReplicas(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{1, true}, {3, true}, {5, true}, {0, false}, {2, false}, {4, false}, {7, false}, {-1, false}} {
		err := natsnames.ValidateReplicas(tc.n)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, natsnames.ErrInvalidReplicas)) {
			t.Errorf("ValidateReplicas(%d) = %v, want ok=%v", tc.n, err, tc.ok)
		}
	}
}

// On a single server, three replicas are refused with an error naming the
// bucket; replicas 0 keeps an existing bucket as it is (an update would
// move it to one replica) and creates a missing one with one.
func TestReplicasOnASingleServer(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	_, err := natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "b3", Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "b3 bucket with 3 replicas") {
		t.Fatalf("R3 bucket on one server: %v", err)
	}
	if _, err := natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 4, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 4 {
		t.Fatalf("replicas 0 reconfigured the existing bucket: history %d", st.History())
	}
	if _, err := natsnames.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "new"}); err != nil {
		t.Fatalf("replicas 0 on a missing bucket: %v", err)
	}
}
