// Package stream owns the contract between collectors and materializers
// (docs/architecture.md, "The stream contract"): stream, bucket and subject
// names (the JetStream API's too: APISubject, for the hub's accounts and guard),
// the stream configuration, the message headers (object and dead-letter),
// the building of object messages (headers, Nats-Msg-Id, tombstone TTL),
// the cluster annotations every object carries, the names of a collector's
// consumers (ConsumerPrefix), encoding of ResourceEvent payloads, and reading
// a resource's state back from a stream (Replay, replay.go: a resumed watch
// and the mover's copy). A file per concept: stream.go the streams' and
// buckets' names and configuration, subjects.go every subject, filter and
// KV key a process spells (the hub account's API prefix, the collectors'
// inboxes and the guard's subjects too), act.go the request channel's
// subjects, registries.go the registries' republish (each collector's one
// subscription), event.go an event's encoding and checks (decode.go its
// allocation-free unmarshal), message.go an object message's headers,
// quota.go the quota refusals, consumers.go consumer names, limits and
// advisories. Every component that reads or writes a cluster stream goes
// through this package so the layout is defined once.
//
// It must not know about Kubernetes informers or any backend.
package stream
