// Package collector runs next to one member cluster (a pod inside it, or
// in-process for `fleetview up`) and is the only writer of that cluster's
// JetStream stream. It watches the ResourceRegistries, resolves what its
// cluster must cache, runs one reflector per resource (and namespace scope)
// and turns Add / Update / Delete into UID-keyed events (DESIGN.md §3.2).
//
// It keeps no object cache: per object it remembers only uid, namespace, name
// and resourceVersion, which is all change detection and ghost removal need.
// It must not read or write any backend.
package collector
