package natsnames

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

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

// ConsumerPrefix starts the name of every consumer a cluster's collector
// creates. With per-cluster credentials the hub refuses a collector every
// consumer request on a name without its own prefix (natsserver's guard),
// so a collector can neither read from nor delete another cluster's
// consumers or the hub's. Cluster names never hold '_', so no cluster's
// prefix starts another's.
func ConsumerPrefix(cluster string) string { return "fvc_" + cluster + "_" }

// ConsumerNamePrefix is a fresh, unguessable consumer name for cluster's
// collector (a hydrate's consumer), or the name prefix of an ordered one
// (jetstream.OrderedConsumerConfig.NamePrefix, a registries read): its own
// prefix, then random characters, so two consumers of one collector never
// share a name.
func ConsumerNamePrefix(cluster string) string { return ConsumerPrefix(cluster) + rand.Text() }

// ReaderIdle is the inactive threshold of a short-lived consumer that
// reads what it needs and deletes itself (a collector's hydrate, a read
// of the registries): one whose delete the hub was too busy to answer in
// time goes away by itself. With nats.go's default for ordered consumers
// (5 minutes; each of their Fetches makes a new consumer and deletes the
// last one in the background) thousands of idle consumers (3 server
// goroutines and their state each) were left on a 2,000-cluster hub right
// after its full sync (measured:
// docs/benchmarks/fleet.md#2000-clusters-x-500-pods-after-the-per-cluster-fixes-2026-12-05).
// A fetch waiting for messages keeps its consumer active, so this
// only has to outlast the time between two fetches.
const ReaderIdle = 30 * time.Second

// ConsumerCluster is the cluster whose prefix (ConsumerPrefix) starts a
// consumer's name; ok is false for a name no collector's prefix starts
// (the hub's own consumers).
func ConsumerCluster(name string) (cluster string, ok bool) {
	rest, ok := strings.CutPrefix(name, "fvc_")
	if !ok {
		return "", false
	}
	cluster, _, ok = strings.Cut(rest, "_")
	if !ok || cluster == "" {
		return "", false
	}
	return cluster, true
}

// JetStream's advisories of consumers created and deleted on a stream
// (nats-server's JSAdvisoryConsumerCreatedPre and
// JSAdvisoryConsumerDeletedPre, then the stream and the consumer).
const (
	consumerCreatedAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.CREATED"
	consumerDeletedAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.DELETED"
)

// ConsumerAdvisories is the subject of every advisory of a consumer
// created or deleted on streamName.
func ConsumerAdvisories(streamName string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.*." + streamName + ".*"
}

// ParseConsumerAdvisory reads an advisory subject (ConsumerAdvisories):
// whether the consumer was created (else deleted) and its name; ok is
// false for any other subject.
func ParseConsumerAdvisory(subject string) (created bool, consumer string, ok bool) {
	for _, pre := range []string{consumerCreatedAdvisory, consumerDeletedAdvisory} {
		if rest, found := strings.CutPrefix(subject, pre+"."); found {
			_, consumer, ok = strings.Cut(rest, ".")
			return pre == consumerCreatedAdvisory, consumer, ok && consumer != "" && !strings.Contains(consumer, ".")
		}
	}
	return false, "", false
}
