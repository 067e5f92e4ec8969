// Package inventory owns the cluster inventory record (one per member
// cluster, kept by that cluster's collector in the fv_clusters JetStream KV
// bucket) and its read/write helpers. The query API and registry matching read
// it; only collectors write it, each its own record, so reads validate each
// record again (its key names it, valid name and labels, bounded columns, a
// known authorization value) and leave a bad one out.
package inventory
