// Package collector runs next to one member cluster (a pod inside it, or
// in-process for `fleetview up`) and is the only writer of that cluster's
// JetStream stream. It follows the ResourceRegistries (a snapshot, then
// the bucket's republished changes on one subscription, with no JetStream
// consumer per collector: registry/store's Follower), resolves what its
// cluster must cache, and mirrors each resource into UID-keyed events
// (docs/architecture.md, "The stream contract").
//
// Registry reconcile: the wanted set is the union, over every registry whose
// ClusterAffinity matches this cluster, of (resource, namespace scope);
// several selectors of one resource merge, so nothing is published twice.
// Only resources whose want changed are stopped and started. A resource no
// registry wants any more gets a RESOURCE_REMOVED control event and its
// subjects are purged — also at start-up, for resources a registry dropped
// while the collector was down. A selected resource the cluster does not
// serve is skipped and looked up again every RecheckInterval, so a CRD
// installed later is picked up without a restart.
//
// Per resource there is no client-go Reflector or informer: list pages are
// streamed item by item as raw JSON and each object is published as it is
// read (liststream.go, internal/rawjson), the next page requested as soon
// as the current one's head has been read; then one watch per namespace
// scope resumes from the list's resourceVersion. Both ask for a Table with
// the whole object in each row (table.go), so each published object
// carries the member's own printed cells and the inventory record the
// resource's columns: the hub answers kubectl's Tables as the member would
// without a printer of its own. Per object the collector
// keeps only uid, namespace, name, resourceVersion and the
// list generation that last saw it — what change detection, UID-reuse
// tombstones and ghost removal need. At start it rebuilds that from the
// stream's message headers (no payloads), so after a restart it republishes
// only what changed and tombstones what is gone, then publishes SYNCED.
//
// Publishing is paced (pacer.go): the publishes left unacknowledged follow
// the hub's acknowledgement latency, so what a whole fleet has in flight
// follows the hub's throughput, not the number of clusters.
//
// Failures never lose an event silently: a publish that fails or is not
// acknowledged forgets the object (or, for a tombstone, remembers it again).
// A list's failure relists. A watch's failure (issue #48, resume.go) ends
// that watch scope: each scope follows the resourceVersion of its last
// event whose publishes were all acknowledged, in event order (a bookmark
// or an unchanged object counts once all before it did), and once NATS is
// reachable again it resumes from there, so the member replays every
// change since — whether the failed publishes waited in the connection's
// bounded reconnect buffer and timed out or failed at once past its bound.
// Before it resumes, a SYNCED marker acknowledged after everything sent
// makes sure the buffer reached the stream; a replayed version the stream
// already holds, or older than one it holds, is not published again (the
// stream's last message of the object is read once per object in doubt),
// so nothing is stored twice or out of order. Only a 410 Gone for the
// acknowledged resourceVersion relists, logged at warn and counted
// (fleetview_collector_resume_expired_total): the changes since are then
// coalesced into the state the list publishes (the history cannot record
// them, docs/history.md, "What it cannot know"). The stream's depth (the
// messages kept per object) is the hub's: with history on it keeps
// several, so changes published back to back all reach the hub; the
// collector creates a stream with Config.StreamDepth (1 unless `up` says
// otherwise) and keeps an existing stream's depth. Objects too
// large for the server's max payload are refused loudly: counter, inventory
// message, and a "<cluster>/Published" condition on the registries.
//
// Status and inventory: each collector merges its own per-cluster conditions
// into every registry's status (revision-checked, see registry/store), and
// writes its cluster's inventory record (labels, provider/region/zone,
// Kubernetes version, served APIs, heartbeat, readiness, per-resource sync
// state and counts). Labels, provider, region and zone come from flags and
// from an optional ConfigMap in the member cluster (default
// kube-system/fleetview-cluster-info; data keys provider, region, zone and
// labels as "k=v,k2=v2"; flags win), re-read at every heartbeat. At every
// heartbeat it also asks the member a SelfSubjectRulesReview as itself
// (authorizers.go): whether every authorizer of the member can list its
// rules, or one (a webhook) cannot, goes into the record's authorization,
// since the hub's member RBAC mirrors RBAC alone.
//
// It must not read or write any backend.
//
// Act through (actthrough.go, issue #30; off unless --act-through names
// classes): ActThrough serves the requests the hub forwards over the
// request channel (internal/relay) against the member apiserver, as the
// caller the hub authenticated (Impersonate-User, Impersonate-Group): the
// collector's own credentials need only the impersonate verb for it, and
// the member's authentication, RBAC and admission decide. Classes: writes,
// logs, reads; exec, attach and port-forward are never forwarded.
package collector
