package natsserver

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/stream"
)

// StreamQuota is the byte quota each of clusters' streams gets on a
// hub whose JetStream holds store bytes: quota (--stream-max-bytes), or,
// when clusters of them would reserve more than nine tenths of the store,
// an equal share of that (JetStream reserves each stream's quota on disk
// as it creates it, and past the store it refuses the next stream: a hub
// of 200 clusters at the default 1 GiB had all but two fail to start). The
// tenth left over is for the buckets and the dead letters. A share below
// twice the largest message is refused, naming what to change.
func StreamQuota(quota int64, clusters int, store int64) (int64, error) {
	if quota <= 0 || clusters == 0 || store <= 0 {
		return quota, nil
	}
	budget := store / 10 * 9
	if quota <= budget/int64(clusters) {
		return quota, nil
	}
	share := budget / int64(clusters) &^ (1<<20 - 1) // whole MiB
	if share < 2*stream.MaxPayload {
		return 0, fmt.Errorf("%w: %d member clusters need at least %d bytes of JetStream storage each (twice the largest message), and JetStream holds %d bytes in all under --state-dir: give the hub more disk, or fewer clusters",
			ErrStoreTooSmall, clusters, 2*stream.MaxPayload, store)
	}
	return share, nil
}
