// Package store keeps ResourceRegistries in the fv_registries JetStream KV
// bucket and each cluster's conditions on them in fv_registry_status (key
// "<cluster>.<registry>", natsnames.StatusKey, written by that cluster's
// collector only). It validates before every write, so an invalid registry
// is never stored, it is the only writer of both buckets, and its reads
// merge the two. Reads validate again (a registry failing is ErrCorrupt; a
// cluster's status failing is left out), and read the registries with
// ordered pull consumers, never push consumers, which the hub refuses
// collectors. Open makes the registries bucket republish every message
// (natsnames.RegistryRePublish); a Follower (follow.go, what collectors use)
// follows them with one core subscription there and a snapshot, as Specs
// reads, at start and whenever a gap, a reconnect or a slow consumer means
// it missed a message, instead of a consumer of its own on the shared
// stream.
package store
