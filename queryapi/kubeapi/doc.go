// Package kubeapi serves fleetview's cache as a read-only Kubernetes API, so
// kubectl, client-go informers and other Kubernetes tools work against
// fleetview unchanged. It owns:
//
//   - discovery (/api, /apis, /api/v1, /apis/{group}/{version}, the
//     aggregated apidiscovery.k8s.io/v2 documents, /version), listing
//     exactly the resources the collectors report as cached, with the union
//     of the short names and categories their member clusters report
//     (Kubernetes' own, from a table, when no cluster reports any: records
//     of older collectors);
//   - GET list, get and watch on the standard resource paths, with
//     labelSelector, fieldSelector, limit/continue, resourceVersion and
//     resourceVersionMatch (NotOlderThan; Exact on lists, validated as
//     Kubernetes does and served by the query service while the cache's
//     state is that version), watch=true, allowWatchBookmarks,
//     sendInitialEvents and timeoutSeconds;
//   - meta.k8s.io/v1 Table output with a CLUSTER column first;
//   - a per-cluster view under /clusters/{name}/ (unique namespace/name keys,
//     for an informer per cluster) and the fleet view at the root, which
//     merges every cluster: there two clusters may hold the same
//     namespace/name, a get by name is then 409 Conflict, and an informer
//     keyed by namespace/name would see one object overwrite the other, so
//     informers should use the per-cluster view.
//
// It must not read the cache directly: every answer comes from fleetview's
// own gRPC services, called in-process through the same client the REST
// gateway uses (queryapi's inproc), so authentication and authorization
// interceptors apply exactly as they do to gRPC and /v1 clients. It is read-only: every other method is 405
// MethodNotAllowed. Discovery and the kind/scope of every requested
// resource come from the cluster inventory (ClusterService.ListClusters),
// read with the caller's credentials too: under an authorization policy a
// Kubernetes client needs `list` on `clusters` besides its resources (the
// counterpart of Kubernetes' system:discovery). One caller's inventory
// answer is reused for a second.
//
// List items and got objects are written from the stored bytes
// (ListRequest.raw, GetRequest.raw) without re-encoding; only apiVersion and kind are inserted when the stored object
// lacks them (objects listed from a member cluster do). In watch events the
// object's metadata.resourceVersion is fleetview's resume token, not the
// member cluster's, because reflectors resume a watch from the last event's
// object; list items keep the member cluster's value and the list's
// metadata.resourceVersion is fleetview's token.
package kubeapi
