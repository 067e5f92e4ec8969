// Package queryapi serves reads across every member cluster from the
// materialized state: the gRPC services of proto/fleetview/v1, the same
// services as REST through grpc-gateway (plus a raw-JSON list path and a
// Kubernetes-style watch stream), the OpenAPI document, health and
// readiness, and registry management. It never calls a member cluster.
//
// The package is the service core and composes the rest; each concern
// beside it has its own package, and none of them imports this one:
//
//   - here: the services (services.go, clusters.go, registries.go; a
//     request's selection, versions and continue tokens), the watch
//     (watch*.go), readiness (ready.go), limits, metrics, the in-process
//     channel (inproc.go) and the server that wires everything (server.go,
//     New);
//   - rest: the REST paths written around the gateway (raw-JSON list, get
//     and search, the watch stream, the OpenAPI document) and the
//     Kubernetes Status of every REST error;
//   - authz: who may read what (the Guard, member RBAC, the audit log);
//   - watchhub: the hub that fans committed batches out to the watches,
//     and its queues;
//   - kubeapi, catalog, console: the Kubernetes-compatible API, the
//     resource catalog it serves, the console;
//   - apierr: the one table from sentinel errors to what each boundary
//     answers.
//
// Design decisions:
//
//   - Objects travel as their stored JSON (the collector's pruned and
//     annotated bytes) from the backend to the client: ListResponse
//     raw_items, GetResponse/SearchHit/WatchEvent raw_object, written into
//     REST and Kubernetes answers without decoding. google.protobuf.Struct
//     is built only for clients that ask (structured=true); it cost
//     several times the fan-out it replaces (measured:
//     docs/benchmarks/query.md#reading-the-figures-against-the-first-targets).
//   - The REST gateway, the /v1 handlers written around it and the
//     Kubernetes API call the services in-process (inproc.go) through the
//     same interceptors as the gRPC port: one authentication and
//     authorization path, without a protobuf and HTTP/2 round trip per
//     answer.
//   - resourceVersion is a sealed token (internal/query.Sealer): per
//     cluster, the stream sequence an answer reflects, plus when it was
//     issued. Continue tokens carry the backend's cursor bound to the
//     filters of their list. Both are HMAC-sealed with a key kept in the
//     fv_query KV bucket (shared by replicas and restarts): a tampered,
//     foreign or cross-used token is 400, never a silent wrong answer.
//   - Paging: the backend pins the snapshot of the first page (Badger: the
//     first page's read transaction is held, bounded in time and count);
//     a continue token whose snapshot is gone is 410 Expired.
//   - List with a resourceVersion waits (VersionWait) until the backend has
//     applied it, else 504 Timeout, like Kubernetes. With
//     resourceVersionMatch=Exact (exact.go) the state of the selected
//     clusters must then be exactly the version's: no history is kept, so
//     a state that has moved past it is 410 Expired.
//   - Watch (watch.go; its start from a list or a resume in watchstart.go,
//     the judging of each event in watchevent.go): a watchhub.Hub fed by
//     the materializer's Observer fans committed batches out; a watch first
//     subscribes, then (when resuming) replays each
//     cluster stream from its resourceVersion through the committed
//     checkpoint, then follows the live feed, dropping by stream sequence
//     what it has already judged: no gap, no duplicate. The compacted
//     streams keep the latest message of every changed object and the
//     tombstones for their TTL, so a version older than MaxResumeAge, a
//     reset stream or a removed cluster stream is 410 Expired. New clusters'
//     objects arrive as ADDED; a resource removed from a cluster ends the
//     watch with 410 (the objects to delete are no longer known). A watch
//     whose buffer overflows is cut with RESOURCE_EXHAUSTED (429); buffers
//     are slice queues (watchhub.Queue), which hold only what is queued, not
//     channels the garbage collector would scan at full capacity. The hub
//     tells ADDED from MODIFIED, and routes watches indexed by a label, by
//     what each event replaced, which the materializer's feed carries
//     (feed.Prior: Badger's writer reads it anyway; for a sink that does
//     not say, OpenSearch's, the materializer keeps the labels of the
//     objects it has applied since it started). The hub keeps no objects.
//   - History (issue #48; history.go, watchhistory.go): the change feed
//     (ListChanges) and an object's revisions (ListRevisions) read a
//     HistoryReader, and Get and List pass asOf to the backend; the feed
//     is admitted like a search (per resource, list), revisions like a
//     Get of the object. With the history on, a resumed watch replays
//     every change since its version from the history (HistoryReplayer)
//     instead of the compacted stream, and is 410 only once the window
//     has passed the version.
//   - Readiness (/readyz, gRPC health) is the hub's own ability to serve:
//     backends usable, NATS answering, the resource catalog loaded (and,
//     under a member-RBAC mode, the members' RBAC objects applied once),
//     the materializer caught up once with the streams as they were at
//     start. No cluster's record takes part, except under a member-RBAC
//     mode, where each followed member's RBAC must have been applied once
//     (authz.RBACReadiness: bounded, and never waiting for a member whose
//     collector is down; /readyz names the members served without it).
//     /readyz/clusters reports each
//     cluster: every registry-selected resource synced by its collector,
//     the backend caught up through the latest sync marker, and every
//     resource its record reports followed by the catalog.
//   - Authorization and the audit log are package authz (the Guard; the
//     members' RBAC as a scope under ModeMemberRBAC and ModeBoth, followed
//     from the cached RBAC objects by authz.RBACFollower; Audit). They
//     are interceptors, the audit first so it records refusals too. A
//     search and a list carry the caller's visibility into the backend
//     (applied before the limit); a watch is narrowed to the caller's
//     clusters and judges hidden objects out before it queues them (they
//     never fill its buffer into a 429). A Get carries it too
//     (query.GetOptions.Visible): the backend reads only visible copies,
//     so a 409 names visible clusters only, one visible copy answers
//     whatever hidden clusters hold, and a hidden object is NotFound in
//     the words of a missing one (Kubernetes' `pods "x" not found`).
//   - Limits (limits.go): list and search answers are capped
//     (MaxListObjects: a full page and a continue token, not an error),
//     watches are counted per client and in all (429 past either, given
//     back when the watch ends), request bodies are bounded before they
//     are decoded (413), and the gRPC server enforces message size,
//     streams per connection and keepalive. A client is its authenticated
//     subject, else its remote host: HTTP requests make their remote
//     address the peer of the in-process calls they lead to.
//     Connections (Limits.Connections, internal/connlimit) are capped in
//     all and per client IP on both ports; a refused one is answered
//     (503/429, gRPC through the tap: UNAVAILABLE/RESOURCE_EXHAUSTED) and
//     closed. The HTTP server bounds headers, body (408) and idle time;
//     its write timeout is renewed per write, so only a client that stops
//     reading is cut, never a watch.
//   - Stored bytes are untrusted: every object of a list, search or watch is
//     checked by the whole JSON grammar (rawjson.Check) before it is
//     written out, and one that fails, or that a Table row or watch line
//     cannot decode, is left out and reported
//     (fleetview_query_malformed_objects_skipped_total{cluster}, a log
//     line), never a 500 or invalid JSON for every cluster the answer
//     spans; a Get of that object alone is ErrCorrupt (500).
//
// Errors from lower layers are sentinel errors; they are translated to gRPC
// codes, HTTP statuses and Kubernetes Status bodies once (apierr.ToStatus,
// and rest.WriteError for the REST answers).
package queryapi
