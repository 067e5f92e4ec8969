// Package stream owns the object stream's contract between collectors and
// materializers (docs/architecture.md, "The stream contract"): each member
// cluster's stream (its name, configuration, byte quota and depth: the
// messages it keeps per object, EnsureDepth), its subjects
// (object and control subjects, the core group spelled
// kubepath.CoreGroupName), the object messages' headers,
// the building of object messages (headers, Nats-Msg-Id, tombstone TTL),
// the cluster annotations every object carries, the encoding of
// ResourceEvent payloads and the one definition of an object event
// (IsObjectEvent), and reading a resource's state back from a stream
// (Replay, replay.go: a resumed watch and the mover's copy). A file per
// concept: stream.go the streams' names and configuration, subjects.go
// every subject and filter of a cluster stream, event.go an event's
// encoding and checks (decode.go its allocation-free unmarshal),
// message.go an object message's headers, quota.go the stream quota's
// refusal. Every component that reads or writes a cluster stream goes
// through this package so the layout is defined once.
//
// The KV buckets, the registries' republish, the request channel's
// subjects and the consumers' names are not the object stream's: they live
// in internal/natsnames (names several owners share) or with their one
// owner (the dead-letter stream in materializer).
//
// It must not know about Kubernetes informers or any backend.
package stream
