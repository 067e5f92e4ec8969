// Package registry owns the ResourceRegistry API: the types that say which
// resources fleetview caches and from which member clusters, their strict
// decoding from YAML or JSON, their validation, and ClusterAffinity matching.
//
// The wire format is Karmada's search.karmada.io/v1alpha1 ResourceRegistry, so
// manifests written for karmada-search apply unchanged; fleetview's own group
// fleetview.io/v1alpha1 carries the same schema plus the includeSecretData
// extension.
//
// The package is pure domain code: it must not talk to NATS, Kubernetes API
// servers or backends, and it must not log. Storing registries and their
// status (JetStream KV) is package store's (internal/registry/store);
// reconciling a cluster's lists and watches against them is the
// collector's, and serving them the query API's; all call into this package.
package registry
