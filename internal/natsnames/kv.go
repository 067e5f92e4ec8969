package natsnames

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ValidateReplicas checks a replica count for fleetview's streams and
// buckets: 1 (a single server), or 3 or 5 (a JetStream cluster). An even
// count tolerates no more failures than the odd one below it while
// costing a copy more, and JetStream allows at most 5.
func ValidateReplicas(n int) error {
	switch n {
	case 1, 3, 5:
		return nil
	}
	return fmt.Errorf("%w: %d (want 1, 3 or 5)", ErrInvalidReplicas, n)
}

// ReplicasError names what could not be created or updated with the
// asked replica count, and why: a single server refuses more than one
// replica, and a cluster refuses more replicas than it has servers with
// JetStream.
func ReplicasError(what string, replicas int, err error) error {
	if err == nil {
		return nil
	}
	if replicas > 1 {
		return fmt.Errorf("%s with %d replicas (--stream-replicas needs a JetStream cluster of at least that many servers): %w", what, replicas, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EnsureKeyValue creates the bucket of cfg, or updates it to cfg
// (replicas included: JetStream moves a bucket's stream between replica
// counts as it does a cluster stream). cfg.Replicas 0 keeps an existing
// bucket as it is, since an update without a replica count would move it
// to one replica, and creates a missing one with one: for processes that
// use what the hub made (rebuild).
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	what := "open " + cfg.Bucket + " bucket"
	if cfg.Replicas < 1 {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		cfg.Replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, ReplicasError(what, cfg.Replicas, err)
	}
	return kv, nil
}
