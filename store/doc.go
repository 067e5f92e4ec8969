// Package store owns where fleetview keeps what it materializes: the set
// of stores it writes to and reads from (Set), behind one interface,
// Backend (backend.go: write, read, search, health, capabilities). Each
// store is a sub-package (badger, the default, and opensearch) that
// implements Backend and offers a Kind; the composition root
// (cmd/fleetview/app/stores.go) registers the kinds in Config. This
// package never imports a store's package, and a new store is one folder
// plus one registration.
//
// The set keeps the route table that says which backend holds each
// resource of each cluster (routing.go, saved across restarts in
// routestate.go), runs one materializer per backend, merges reads over the
// backends (merge.go), moves a resource's objects when its route changes
// (mover.go), and decides which backend reports each committed event to
// watchers.
//
// It also owns the state directory (statedir.go): the live default store,
// the replica's id (ReplicaID, created once), which names its durable
// consumers (Durable) so replicas never share one, and the switch to a
// store `fleetview rebuild` replayed (Rebuild in rebuild.go, switched in
// by renames at the next New). It asks every remote backend for its
// health every 2 seconds (health.go), for readiness, the inventory and the
// registries' BackendReachable condition.
//
// The materializer keeps the pipeline (fetch, apply, dead letters) and
// sees a store only as its Sink; the set hands the query API a reader
// (RoutingReader). The composition root wires it to NATS and to the query
// API. See docs/architecture.md, "Routing resources to backends".
package store
