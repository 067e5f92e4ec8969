// Package opensearch is the OpenSearch backend: a materializer.Sink that
// bulk-writes objects into one index per kind, and a reader (Get, List,
// Search) that answers exactly what the Badger backend answers for the same
// streams. Store is a store.Backend; Kind (kind.go) registers it as the
// store a registry's backendStore.openSearch names, one backend per address
// set and secret (ID), with its credentials resolved by credentials.go.
//
// Layout:
//
//   - Index `<prefix><lowercase kind>` (prefix "kubernetes-" as in Karmada),
//     created on first write with Karmada's mapping: metadata.annotations,
//     metadata.labels, spec and status stored but not indexed
//     (`enabled: false`); name, namespace and resourceVersion with keyword
//     sub-fields. fleetview's own fields live under `fleetview`: cluster,
//     group/version/resource and gvr, labels as "k=v" keywords and label
//     keys (for selectors), the stream sequence, `text` (names, label and
//     annotation keys and values: what Search matches) and `object`, the
//     original object JSON as a string, stored not indexed and returned
//     verbatim by reads (so both backends return the same bytes); indexed
//     for full text too with Options.FullTextObject.
//   - Counts and relations (extract.go; mapping version 2, in each
//     index's _meta): a Pod's status.phase and spec.nodeName under
//     `fleetview.values` and its images under `fleetview.images`
//     (keywords); every document's `fleetview.key`
//     (`<kind>/<name>/<cluster>/<group>/<ns>`), its outgoing owner and
//     reference edges from internal/relations as `fleetview.refs`
//     (`<type>/` and the target's key, so a prefix names a kind and name
//     anywhere), and its label selector (`fleetview.selects`, the kind it
//     selects; `fleetview.selector`, stored JSON). An index of version 1
//     gets the fields at the first write; while documents without them
//     remain, counts are made by listing and relation reads are
//     query.ErrNotKept (Store.current).
//   - Document id `<cluster>/<group>.<version>.<resource>/<uid>`: UIDs are
//     unique per cluster only, and the same object served under two
//     resources (core and events.k8s.io Events) must not collide.
//   - Writes use external versioning with the stream sequence
//     (version_type=external, deletes too), so a replay or a redelivery can
//     never regress a document: a 409 means "already newer" and is success.
//   - The checkpoint of each cluster stream is a document in the
//     checkpoints index, written only after the bulk holding the events
//     before it was fully acknowledged (and the touched indices refreshed,
//     so a page read at a checkpoint sees every object up to it).
//
// Count (counts.go) answers from a composite aggregation under the
// list's own query (listQuery: selectors and the caller's visibility),
// paged through its buckets; what the keywords cannot answer exactly is
// store.ErrCountUnindexed, and the store counts it by listing. Related
// (related.go) walks breadth first with at most four queries per level;
// the relation field selectors (relfilter.go) resolve to document ids
// that narrow the list. Both apply the caller's visibility to every node
// as the Badger store does, so the answers are the same.
//
// Reads never take a search some shards failed to answer (a data node
// lost) for a whole one: a live read retries for Options.ReadRetry, then
// fails with query.ErrNotReady; a page of a point in time that lost shards
// is query.ErrExpired (see docs/architecture.md, "OpenSearch as a
// cluster").
//
// Transient failures (connection refused, 429, 5xx, per-item rejections)
// are retried with capped exponential backoff until the context ends;
// nothing is dropped. An item OpenSearch refuses for good (a mapping error)
// is reported as materializer.PoisonError so the materializer dead-letters
// it and carries on.
package opensearch
