// Package backends owns the set of stores fleetview materializes into and
// reads from: the Badger store (the default) and one OpenSearch store per
// address set that registries name in backendStore.openSearch. It keeps
// the route table that says which backend holds each resource of each
// cluster (routing.go, saved across restarts in routestate.go), runs one
// materializer per backend, merges reads over the backends (merge.go),
// moves a resource's objects when its route changes (mover.go), and decides
// which backend reports each committed event to watchers.
//
// It sits above the materializer and its sinks and hands the query API a
// reader; the composition root (cmd/fleetview/app) wires it to NATS and to
// the query API. See docs/architecture.md, "Routing resources to backends".
package backends
