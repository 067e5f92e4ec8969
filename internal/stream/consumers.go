package stream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// SharedMaxConsumers is the consumer limit of the streams every member
// cluster's collector follows at once (the registries bucket). A stream
// that sets no limit gets nats-server's default of 1,000 consumers
// (JSDefaultMaxConsumersPerStream), and an unlimited one (-1) counts as
// setting none, so without an explicit limit the 1,001st cluster's
// collector could not follow the registries. What one cluster holds is
// bounded apart from this (natsserver.Quotas.RegistryConsumers).
const SharedMaxConsumers = 1 << 20

// AllowSharedConsumers gives the stream behind bucket SharedMaxConsumers
// as its consumer limit, unless it already has it.
func AllowSharedConsumers(ctx context.Context, js jetstream.JetStream, bucket string) error {
	name := KVStream(bucket)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxConsumers == SharedMaxConsumers {
		return nil
	}
	cfg.MaxConsumers = SharedMaxConsumers
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: consumer limit %d: %w", name, SharedMaxConsumers, err)
	}
	return nil
}
