// Package natsnames owns the names on the hub's NATS that several owners
// share, so each is spelled once and no owner imports another for it: the
// subject root, the KV buckets and their keys (names.go: the registries and
// their per-cluster status, kept by internal/registry/store; the cluster
// inventory, internal/inventory), the registries' republish (registries.go),
// the request channel's subjects (act.go: internal/relay speaks them), the
// names of a collector's consumers, JetStream's consumer advisories and
// the consumer limit of the buckets every cluster shares (consumers.go),
// and the rules every stream and bucket fleetview makes
// shares (kv.go: replica counts, EnsureKeyValue; quota.go: the hub's quota
// refusal). internal/natsserver reads all of them to grant each member
// cluster's account its own share, and cannot import the owners (their
// tests start its server).
//
// A name only one owner uses lives with that owner: the object stream's
// subjects and configuration in internal/stream, the JetStream API and
// account subjects of the hub's accounts and guard in internal/natsserver,
// the request channel's headers in internal/relay, the dead-letter stream
// in materializer, the query API's bucket and epoch stream in queryapi.
// Every name here is on the wire: changing one strands what existing
// streams and buckets hold.
package natsnames
