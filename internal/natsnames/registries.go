package natsnames

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// The registries bucket's stream republishes every message it stores
// (RegistryRePublish) on RegistryUpdates, which the hub account exports
// to every cluster account as a stream, one way: each collector follows
// the registries with one core subscription instead of a JetStream
// consumer of its own on the shared stream. nats-server republishes on
// the stream's leader after storing, with the headers Nats-Stream,
// Nats-Subject, Nats-Sequence, Nats-Last-Sequence (the subject's previous
// sequence, 0 for its first) and the KV operation's own, so a follower can
// tell a missed message by the key's sequence it holds.

// RegistryUpdates is the subject tree the registries are republished on,
// "fv.reg.<key>": as a subscription, an export and a permission.
const RegistryUpdates = SubjectRoot + ".reg." + FullWildcard

// RegistryUpdate is the subject a registry key's messages are republished on.
func RegistryUpdate(key string) string {
	return strings.TrimSuffix(RegistryUpdates, FullWildcard) + key
}

// RegistryRePublish is the registries bucket's republish directive: every
// key's messages onto RegistryUpdate(key), headers and value.
func RegistryRePublish() *jetstream.RePublish {
	return &jetstream.RePublish{Source: KVKeys(RegistryBucket), Destination: RegistryUpdates}
}

// Headers nats-server puts on a republished message.
const (
	// RePublishSubject is the subject the message was stored under.
	RePublishSubject = "Nats-Subject"
	// RePublishSequence is its stream sequence.
	RePublishSequence = "Nats-Sequence"
	// RePublishLastSequence is the stream sequence of the subject's
	// previous message, 0 when there was none.
	RePublishLastSequence = "Nats-Last-Sequence"
)
