// Package catalog owns the query API's resource catalog: which resources
// the hub serves on the Kubernetes API, with which kind, scope, short
// names and categories, and which clusters serve each. It is maintained
// incrementally from a watch of the inventory bucket and a watch of the
// registries, held by the process, and read (filtered by the caller's
// visibility) by every Kubernetes request without a call of its own.
//
// Inventory records are written by member clusters' collectors, so none is
// trusted to say what another cluster's objects mean:
//
//   - a cluster's resource is followed only if a registry selects it (its
//     group, version and kind) for that cluster;
//   - a built-in resource's kind, scope, short names and categories are the
//     hub's own (a table checked against client-go's scheme and a real
//     kube-apiserver); a record that disagrees is marked, not followed, and
//     no other resource may claim a built-in's kind;
//   - a custom resource takes the kind and scope most of its clusters
//     report; a tie serves it from none (fail closed); its short names and
//     categories are those all its clusters agree on, less the built-ins'
//     names and any short name another served resource also has;
//   - one group, version and kind names one resource.
//
// A marked cluster's resource shows in the cluster list as not followed,
// with the reason (Snapshot.Mark); only that cluster loses it.
//
// Config.OnLabels hears each change of a cluster's labels (member RBAC
// identity maps select members by them).
package catalog
