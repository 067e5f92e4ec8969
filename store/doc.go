// Package backends owns the set of stores fleetview materializes into and
// reads from: the Badger store (the default) and one OpenSearch store per
// address set that registries name in backendStore.openSearch. It keeps
// the route table that says which backend holds each resource of each
// cluster (routing.go, saved across restarts in routestate.go), runs one
// materializer per backend, merges reads over the backends (merge.go),
// moves a resource's objects when its route changes (mover.go), and decides
// which backend reports each committed event to watchers.
//
// It also owns the state directory (statedir.go): the live Badger store,
// the replica's id (ReplicaID, created once), which names its durable
// consumers (Durable) so replicas never share one, and the switch to a
// store `fleetview rebuild` replayed (Rebuild in rebuild.go, switched in
// by renames at the next New). It asks every OpenSearch backend for its
// health every 2 seconds (health.go), for readiness, the inventory and the
// registries' BackendReachable condition.
//
// It sits above the materializer and its sinks and hands the query API a
// reader; the composition root (cmd/fleetview/app) wires it to NATS and to
// the query API. See docs/architecture.md, "Routing resources to backends".
package store
