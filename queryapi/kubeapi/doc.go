// Package kubeapi serves fleetview's cache as a read-only Kubernetes API, so
// kubectl, client-go informers and other Kubernetes tools work against
// fleetview unchanged. It owns:
//
//   - discovery (/api, /apis, /api/v1, /apis/{group}/{version}, the
//     aggregated apidiscovery.k8s.io/v2 documents, /version), listing
//     exactly the resources the resource catalog (queryapi/catalog) serves,
//     with the kind, scope, short names and categories the catalog trusts
//     (a built-in's from the hub itself, a custom resource's from its
//     clusters' agreement);
//   - the list policy (listpolicy.go): a paged list (limit of 500 or
//     more, or none) is answered with every object up to a budget,
//     streamed a read page at a time with an exact continue token after
//     the last object, as ListOptions.limit's contract allows; strict
//     paging (at most limit) on request;
//   - GET list and get (resource.go) and watch (watch.go) on the standard
//     resource paths, with the query parameters parsed in params.go:
//     labelSelector, fieldSelector, limit/continue, resourceVersion and
//     resourceVersionMatch (NotOlderThan; Exact on lists, validated as
//     Kubernetes does and served by the query service while the cache's
//     state is that version), watch=true, allowWatchBookmarks,
//     sendInitialEvents and timeoutSeconds, and fleetview's asOf on a get
//     or list (the state at a past moment, from the hub's history; parsed
//     once into a time by query.ParseAsOf, 400 on a watch);
//   - meta.k8s.io/v1 Table output with a CLUSTER column first, then the
//     member's own columns and cells as its collector stored them
//     (table.go: written as bytes, Age computed for now, includeObject by
//     cutting bytes; docs/architecture.md, "Tables");
//   - content negotiation (negotiate.go) and Kubernetes' protobuf
//     encoding (protobuf.go): when Accept asks for
//     application/vnd.kubernetes.protobuf first, get, list and watch of a
//     kind client-go's scheme knows are answered as a kube-apiserver
//     answers them (the "k8s\x00" envelope; watch events as
//     length-prefixed frames), each stored object decoded with the
//     scheme's JSON serializer and encoded by apimachinery's protobuf
//     serializer; a custom resource in protobuf alone is 406 NotAcceptable,
//     a Table is JSON only, and Status errors take the encoding Accept
//     negotiates for them. An Accept that does not mention protobuf is
//     read as it always was, so JSON answers stay the spliced bytes;
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
// interceptors apply exactly as they do to gRPC and /v1 clients. It is read-only by default: every other method is 405
// MethodNotAllowed. With ActThrough (forward.go, issue #30; the hub's
// --act-through) what the cache does not serve is forwarded to the member
// through its collector (internal/relay), as the caller the Guard
// authenticated (as the member identity map names it in that cluster,
// ActThroughConfig.As): under /clusters/{name}/ writes of every verb, subresources
// (logs included, followed or not), discovery, OpenAPI and reads of
// resources no registry caches; in the fleet view a write or subresource
// of a named object goes to the cluster that holds it, and a create or a
// name two clusters hold is refused with a Status naming the per-cluster
// path. Cached get, list and watch stay the cache's; exec, attach and
// port-forward are 501. Each forwarded request writes one audit line.
// The requests in flight are bounded per cluster and per caller in a
// cluster, watches and followed logs apart (relaylimit.go), so that no
// caller holds a cluster's channel. The
// answer to a forwarded write of a cached resource waits, bounded, until
// the cache holds what the member wrote (readyourwrites.go), so the
// caller's next cached read shows it. Discovery and the kind/scope of every requested
// resource come from the process's resource catalog, filtered by what the
// caller may see (Visibility: the Guard's judgment, as for ListClusters'
// discovery view) without a call of their own: a read writes one audit
// line, its own, and discovery none.
//
// JSON list items and got objects are written from the stored bytes (the
// answers' raw_items and raw_object) without re-encoding; only apiVersion
// and kind are inserted when the stored object lacks them (objects listed from a member cluster do). In watch events the
// object's metadata.resourceVersion is fleetview's resume token, not the
// member cluster's, because reflectors resume a watch from the last event's
// object; list items keep the member cluster's value and the list's
// metadata.resourceVersion is fleetview's token.
package kubeapi
