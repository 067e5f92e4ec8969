// Package badger is the default backend: an embedded Badger store holding
// every materialized object on disk, with the stream checkpoints committed in
// the same transaction as the objects (exactly-once in effect), and the read
// path the query API uses. Backend (backend.go) is the store.Backend the set
// holds, Kind its registration as the default store; it never imports the
// set's internals, only package store's interface.
//
// The write path: a batch's transaction and its upserts (write.go), what an
// upsert reads of the object it replaces (write_previous.go: the overlays of
// this batch and the one in flight, the uid index, the record), and deletes
// by uid and of a removed resource (write_delete.go).
//
// Key layout (\x00-separated, so byte order is namespace, name, cluster order):
//
//	o/<group>/<version>/<resource>/<namespace>/<name>/<cluster>  -> seq, labels, Table cells, row spans, object JSON
//	l/<group>/<version>/<resource>/<labelkey>/<labelvalue>/<namespace>/<name>/<cluster> -> ""
//	s/<group>/<version>/<resource>/<namespace>/<name>/<cluster>  -> search text (in the value log)
//	p/<cluster>/<group>/<version>/<resource>/<namespace>/<name>/<cluster> -> ""
//	u/<cluster>/<group>/<version>/<resource>/<uid>               -> 0x01, namespace, name, hash of the labels
//	c/<cluster>                                                   -> last applied stream sequence (user meta countedMeta: counters kept with it)
//	E/<cluster>/<group>/<version>/<resource>/<namespace>/<name>  -> hash, kind, uid, a Pod's labels; the object's owner and reference edges, its selector
//	R/<cluster>/<tgroup>/<tkind>/<tns>/<tname>/<code><group>/<version>/<resource>/[<namespace>/]<name> -> the source's kind, uid (packed: appendUID)
//	  (code: one byte, the edge's type and whether the source's namespace is the target's, then left out; before 2026-12-07 13:00
//	  .../<tname>/<type>/<group>/<version>/<resource>/<namespace>/<name> -> kind, uid as text, empty before 05:00; both read)
//	Q/<cluster>/<namespace>/<group>/<version>/<resource>/<name>  -> the object's label selector (JSON)
//	K/<group>/<kind>                                              -> version, resource, cluster-scoped
//	v/<group>/<version>/<resource>/<dimension>/<value>/<namespace>/<name>/<cluster> -> ""
//	X/<group>/<version>/<resource>/<namespace>/<name>/<cluster>  -> the object's v/ (dimension, value) pairs
//	M/valueindex                                                  -> the v/ dimensions kept since the store was empty
//	C/<group>/<version>/<resource>/<dimension>/<cluster>/<namespace>/<value> -> count of objects (8 bytes BE; dimension "" counts all)
//	M/counters                                                    -> "": counters were kept since the store was empty
//
// History (history*.go, docs/history.md), when HistoryOptions are set,
// written in the same transaction as the object and the checkpoint:
//
//	r/<cluster>/<group>/<version>/<resource>/<uid17>/<seq 8 BE> -> 4, type, time, rv, manager, operation, subresource, flags, reverse patch or previous state (s2), own state (s2)
//	f/<cluster>/<group>/<version>/<resource>/<seq 8 BE>         -> time (a resumed watch's replay, in stream order; the t/ entry names the uid)
//	t/<time 8 BE>/<cluster>/<seq 8 BE>                           -> 2, type, gvr, uid17, namespace, name, rv, manager, operation, subresource, labels inline or their J/ hash
//	x/<time 8 BE>/<cluster>/<seq 8 BE>                           -> "" (deletes only: the recently deleted view; t/ at the same time, cluster, seq holds the change)
//	J/<epoch 8 BE>/<cluster>/<hash 8 BE>                         -> a label set the t/ entries of that hour (epoch) and cluster name by hash (history_labels.go)
//	H/<group>/<version>/<resource>/<cluster>/<namespace>/<time 8 BE>/<name> -> "" (a resource's changes by cluster, namespace and time: an as-of list's changed objects)
//	n/<cluster>/<group>/<version>/<resource>/<namespace>/<name>/<uid> -> "" (an object's uids by name, deleted ones too)
//	h/<cluster>, g/<cluster>                                    -> history bytes added by the materializer, removed by retention
//	a/<cluster>, m/<cluster>                                    -> seq before the first recorded change, last seq retention removed
//	b/h, e/h                                                    -> when history began, time through which retention removed
//	b/H                                                          -> "": H/ holds every change t/ holds (set at open, once an older store's changes are indexed)
//	D/, b/D: H/'s time-first predecessor (D/<gvr>/<time>/<namespace>/<name>/<cluster>), dropped at open and H/ made from t/
//	b/r                                                          -> "": every r/ key has the uid as uidForm writes it (set when the store begins its history)
//
// uid17 is a canonical (lower-case) UUID packed as the byte 2 and its 16
// bytes, any other uid its text (history_format.go). What a binary before
// 2026-12-07 10:00 wrote is read as it is and removed by retention: r/
// keys with the uid as text (read too while b/r is absent), revisions of
// format 3 (the forward patch stored, states plain), f/ values of uid and
// time, t/ values of format 1 (the uid as text, the labels inline) and
// x/ values repeating them.
//
// The uid index entry carries the object's history head (newest
// revision's seq, time, reverse patches since the last whole state, rv),
// so an update learns how to record itself from the entry it reads anyway;
// it reads the previous object's JSON to make the patches (for a whole
// batch before it is applied, several reads in flight: history_prefetch.go).
// The same parallel workers make, before the batch's serial apply, what of
// each upsert's history depends only on the event and that JSON: the
// patches, the previous state compressed when no patch will do, the
// change's keys and t/ body (history_pre.go); an upsert whose previous
// state an earlier event of the batch wrote makes them on the serial path,
// byte for byte the same (TestHistoryPreStage).
// Revisions are
// reverse deltas: the newest revision of a live object stores no state
// (the o/ record is it), and each revision carries what rebuilds the
// state before it from its own: a reverse merge patch, or that state
// whole when the patch is not under half the object, does not give back
// the exact bytes (rawMergePatchExact vouches for a compact object
// without applying it), or the reverse patches since the last whole one
// would reach twice the object's bytes or SnapshotEvery revisions
// (chainCost; a whole state is s2-compressed; before 2026-12-07 22:00
// every 16th revision kept one: readers find the nearest whole state
// wherever it is). The change it shows, the
// forward patch, is made when read, from the reverse patch and its state
// (forwardFromReverse: the bytes the writer's diff would have stored) or
// from the whole previous state. A
// delete's revision holds the last state (own), as does the newest
// revision of an object whose record leaves without a delete (its name
// reused by a new uid, its resource removed). An added object so costs
// no copy of itself. Retention (history_retain.go) drops the oldest
// revisions without rewriting any (states come from newer ones), and
// keeps a live object's newest revision past the window (without feed
// entries); its next change drops it and is the first kept. Revisions
// written before reverse deltas (format bytes 1 and 2) are not read.
// An as-of list is List's own scan told what to leave out
// (history_asoflist.go), merged in key order with the changed objects
// rebuilt as they were (history_asofmerge.go), which workers judge from
// their records and revisions (history_asofjudge.go, history_asof_record.go;
// a long chain's patches applied in one walk: history_asof_chain.go).
//
// The label index makes an equality-selected list cost the size of its
// answer, not of the resource; the per-cluster index (p/) makes a list of
// one cluster cost that cluster's objects, not the fleet's. The uid index entry carries a hash of the
// object's labels (and search text, and when relations are kept its E/
// header: relMetaHash), so an update that keeps them (events name the uid)
// learns what it replaces from a small LSM value instead of the object's
// record in the value log; an entry exists exactly while the object at its
// key has its uid.
//
// The value index (v/, valueindex.go) holds per object the values of a
// few field paths and its container images (Pods' status.phase,
// spec.nodeName and images by default), so counts (counts.go) group by
// them from keys alone, as they group by cluster, namespace (o/, p/) and
// label (l/); a list whose field selector requires such a path to equal a
// value reads that value's range as a label-selected list reads l/.
//
// The counters (C/, counters.go) count the objects per cluster, namespace
// and resource, and per value of each value index dimension, changed in
// the same transaction as the o/ or X/ entry that decides them, so a
// count without selectors (by cluster x phase, by image) reads O(groups)
// keys; visibility is judged per (cluster, namespace) as on the index path.
// They are trusted only when kept since the store was empty (M/counters)
// and every cluster's checkpoint (c/) carries the user meta byte
// countedMeta, which a binary keeping them writes with each checkpoint:
// a binary that predates them (a downgrade) neither updates the counters
// nor knows M/counters, but writes a checkpoint with each batch, without
// the byte, so on the next open the counters are dropped from use (the
// index path answers, with a warning) until `fleetview rebuild`. Readers
// ignore the byte, so the older binary still runs on the store. Builds
// that kept counters before the stamp (2026-12-07) wrote none: their
// stores are rebuilt once. The one write of an older binary that moves no
// checkpoint, part of a removal too big for one transaction stopped
// halfway, is replayed by the next binary, whose removal sets the
// resource's counters in that cluster to zero (zeroCounters).
//
// The search index (s/, same layout as o/) holds per object what a
// free-text search matches beyond its key: label and annotation keys and
// values, lower-cased (materializer.LabelsAndSearchText), about a thirtieth of a
// Pod's bytes. Search reads it instead of the objects, and reads an object
// only to confirm a candidate.
//
// The relationship index (relate.go; its keys in relate_keys.go, the part
// of an object relations are read from in relate_doc.go; read by related.go (the walk's
// levels and expand; its state, kept between calls, in related_walk.go;
// the last hop's runs of R/ keys in related_reverse.go), related_read.go
// and relfilter.go through seeker.go) is kept by every upsert and delete from what internal/relations reads in
// the object: E/ holds an object's outgoing edges (owner references and
// the objects its spec names, by group, kind, namespace and name, as
// references name them) and its selector, after a header with what a
// Related node shows of the object (kind, uid; a Pod's labels, which
// selectors are matched against), so a walk reads each neighbour's E/
// entry, never its record in the value log (relate_edges.go; an object
// has an E/ entry only while the store holds it); R/ is the same edges keyed by
// their target, so "what does this object own, who mounts this Secret" is
// one prefix scan, also for a target no cluster sent, and its value
// repeats the source's kind and uid, so the last hop of a walk reads no
// E/ entry for the sources it finds there (relate_edges.go: values
// written before 2026-12-07 05:00 are empty, and those sources are read
// from their E/ entries; no rebuild is needed). R/ keys written before
// 2026-12-07 13:00 spell the edge type out and repeat the source's
// namespace (oldReverseKey): both forms are read, each E/ edge's type
// byte says which form its R/ key has ('o', 'r': the older; 'O', 'R'),
// and an edge rewritten is written in the current form, its older key
// deleted; no rebuild is needed, but a binary from before cannot read
// the E/ entries of this one. A Pod's reference to an object every Pod of
// its namespace names (relations.Shared: kube-root-ca.crt, the default
// ServiceAccount) has no R/ key (type byte 'S', since 2026-12-07 15:00):
// a walk shows such an object but does not go through it to every other
// Pod of the namespace, so only a walk starting from it needs its
// referrers, and finds them among the namespace's Pods' E/ entries
// (relWalk.sharedReferrers); keys written before are read, and deleted
// when their Pod's edges are rewritten. Q/ holds each
// selector once, under its cluster and namespace, so "what selects this
// Pod" scans the selectors of one namespace of one cluster, and "which Pods
// does it select" is a label-index lookup at read time. Selectors are not
// turned into edges: those would have to be rewritten for every selector
// of the namespace on every Pod change. An update whose E/ header did
// not change (a status update) reads no E/ entry: the uid entry it reads
// anyway has the header's hash mixed into its own (relMetaHash, since
// 2026-12-07 19:00; an entry with the plain hash, an older binary's or
// a store's without relations, costs the E/ read as before, and an older
// binary reading the mixed hash takes it for a label change: a read of
// the record). One that changes the header or some edges
// (a relabeled Pod) rewrites the E/ entry and only the R/ and Q/ keys
// that changed. What depends on the new object alone (its relations'
// document, hash, edges, an add's R/ keys) is read by workers while the
// batch's loop applies it (relate_pre.go). The header's hash is xxhash
// (relDocHash; FNV-1a before 2026-12-07 19:00: such an entry is
// rewritten on its object's first update). The E/ value's layout changed on 2026-12-07 (the header):
// a store kept with relations before then is rebuilt (fleetview rebuild)
// before it is served again. A kind with neither (most ConfigMaps, Nodes)
// costs a scan of its bytes for "ownerReferences". K/ maps a kind to its
// resource for references, which name kinds; it is written once per
// resource and process. Copies across clusters need no entry: they share
// the o/ prefix up to the cluster. A store keeping relations also keeps,
// in the value index (v/, X/), the metadata.name of the kinds a relation
// field selector names most (nameIndexed: Deployments, ReplicaSets,
// StatefulSets, DaemonSets, Jobs, CronJobs, Services), so
// fleetview.io/ownedBy=Deployment/web without a namespace finds web in one
// range (namedObjects), not by reading every Deployment key; a store
// written before keeps reading the keys until a rebuild (the value index's
// M/valueindex record says which dimensions are complete).
//
// Memory: objects are in Badger's value log, which Badger writes through an
// mmap; the page recycler (recycle_linux.go) drops those pages once they are
// on disk, so the page cache does not grow with everything ever written;
// a batch's records are carved from reused chunks (slab.go) until its
// commit is done, not allocated one per event.
// Disk: a store keeping history compresses its LSM tables with ZSTD
// (lsmCompression: its revisions and feed entries in about a third of
// their bytes), one without leaves them plain; each table records its own.
// Every update leaves the object's previous JSON behind in the value
// log; the store runs Badger's value-log GC every ValueLogGCInterval
// (valuelog_gc.go), rewriting a file once half of it is superseded.
// Badger itself comes from third_party/badger: upstream v4.9.6 with a small
// patch for the materializer's write rate (sorted commits, fewer
// allocations per entry, a finger search for the memtable's writer), each
// change explained in its FLEETVIEW.md.
package badger
