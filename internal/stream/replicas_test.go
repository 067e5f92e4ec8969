package stream_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
)

// On a single server, three replicas are refused with an error naming the
// stream and the flag (natsnames' TestReplicasOnASingleServer: a bucket).
func TestReplicasOnASingleServer(t *testing.T) {
	_, _, js := natstest.Start(t, 0)
	ctx := context.Background()
	_, _, err := stream.EnsureStream(ctx, js, "r", 3, 0, 0)
	if err == nil || !strings.Contains(err.Error(), "stream FV_r with 3 replicas") || !strings.Contains(err.Error(), "--stream-replicas") {
		t.Fatalf("R3 stream on one server: %v", err)
	}
}
