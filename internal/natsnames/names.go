package natsnames

import "strings"

// SubjectRoot prefixes every fleetview subject.
const SubjectRoot = "fv"

// Wildcards of a subject filter: Wildcard matches one token, FullWildcard
// (last only) every token after.
const (
	Wildcard     = "*"
	FullWildcard = ">"
)

// The KV buckets several owners name (the hub's accounts grant each
// member cluster its keys in them).
const (
	// RegistryBucket is the JetStream KV bucket holding ResourceRegistries.
	RegistryBucket = "fv_registries"
	// RegistryStatusBucket holds each cluster's conditions on each registry,
	// key "<cluster>.<registry>": a cluster's credentials can be limited to
	// its own keys, which a status inside the registry value would not allow.
	RegistryStatusBucket = "fv_registry_status"
	// ClusterBucket is the JetStream KV bucket holding the cluster inventory.
	ClusterBucket = "fv_clusters"
)

// KVStream is the stream behind the key-value bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is where key lives in bucket; KVSubject(bucket, ">") matches
// every key.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// KVKeys matches every key of bucket.
func KVKeys(bucket string) string { return KVSubject(bucket, FullWildcard) }

// KVKey is the key a subject of bucket names (KVSubject reversed); ok is
// false for a subject of another bucket.
func KVKey(bucket, subject string) (key string, ok bool) {
	if key, ok = strings.CutPrefix(subject, KVSubject(bucket, "")); !ok {
		return "", false
	}
	return key, true
}

// StatusKey is the RegistryStatusBucket key of cluster's conditions on a
// registry. The cluster comes first so a cluster's credentials can be
// limited to StatusKeys(cluster) whatever the registry names hold.
func StatusKey(cluster, registry string) string { return cluster + "." + registry }

// StatusKeys matches every status key of cluster.
func StatusKeys(cluster string) string { return StatusKey(cluster, FullWildcard) }
