package registry

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types on a registry's status. Several collectors write one
// registry's status, each only its own per-cluster conditions (type
// "<cluster>/<kind>", a valid prefixed condition type because cluster names
// are DNS labels); the registry-wide ones are derived from the spec and from
// the per-cluster conditions, so every writer computes the same value.
const (
	// ConditionMatched (registry-wide) is True while at least one cluster
	// caches resources for the registry; its message lists the clusters.
	ConditionMatched = "Matched"
	// ConditionSecretData (registry-wide) is True when Secret data and
	// stringData are cached (spec.includeSecretData), False when stripped.
	ConditionSecretData = "SecretData"
	// ConditionBackendReachable (registry-wide, only on registries with a
	// backendStore) is True while the answering serve replica can use the
	// backend, False, reason Unreachable, when it cannot; the message names
	// the backend and the error. Each replica answers with its own view: it
	// is not stored.
	ConditionBackendReachable = "BackendReachable"

	// ClusterMatched ("<cluster>/Matched") is True while the cluster matches
	// the registry; its message lists what the cluster caches for it.
	ClusterMatched = "Matched"
	// ClusterAPIsServed ("<cluster>/APIsServed") is False, reason NotServed,
	// when the cluster does not serve a selected resource; the message names
	// cluster and resources.
	ClusterAPIsServed = "APIsServed"
	// ClusterPublished ("<cluster>/Published") is False, reason
	// ObjectsRefused, when objects were refused (e.g. larger than the NATS
	// max payload); the message names them.
	ClusterPublished = "Published"
	// ClusterWildcards ("<cluster>/Wildcards", only on registries with a
	// wildcard selector) is True, reason Expanded, once the cluster's
	// discovery has been read; its message says how many kinds each
	// wildcard stands for there and which matched kinds were left out,
	// and why.
	ClusterWildcards = "Wildcards"
)

// Reasons used by the conditions above.
const (
	ReasonClusterMatched   = "ClusterMatched"
	ReasonClustersMatched  = "ClustersMatched"
	ReasonNoClusterMatched = "NoClusterMatched"
	ReasonAllServed        = "AllServed"
	ReasonNotServed        = "NotServed"
	ReasonAllPublished     = "AllPublished"
	ReasonObjectsRefused   = "ObjectsRefused"
	ReasonIncluded         = "Included"
	ReasonStripped         = "Stripped"
	ReasonExpanded         = "Expanded"
	ReasonReachable        = "Reachable"
	ReasonUnreachable      = "Unreachable"
)

// ClusterConditionType is the type of a per-cluster condition.
func ClusterConditionType(cluster, kind string) string { return cluster + "/" + kind }

// refreshRegistryConditions derives the registry-wide conditions.
func refreshRegistryConditions(r *ResourceRegistry) bool {
	st := &r.Status
	var clusters []string
	for _, c := range st.Conditions {
		if i := strings.Index(c.Type, "/"); i > 0 && c.Type[i+1:] == ClusterMatched && c.Status == metav1.ConditionTrue {
			clusters = append(clusters, c.Type[:i])
		}
	}
	sort.Strings(clusters)
	m := metav1.Condition{Type: ConditionMatched, Status: metav1.ConditionFalse, Reason: ReasonNoClusterMatched,
		Message: "no member cluster caches resources for this registry", ObservedGeneration: r.Generation}
	if len(clusters) > 0 {
		m.Status, m.Reason, m.Message = metav1.ConditionTrue, ReasonClustersMatched, "clusters: "+strings.Join(clusters, ", ")
	}
	changed := meta.SetStatusCondition(&st.Conditions, m)
	s := metav1.Condition{Type: ConditionSecretData, Status: metav1.ConditionFalse, Reason: ReasonStripped,
		Message: "Secrets are cached metadata-only: data and stringData are stripped (set spec.includeSecretData: true to cache them)", ObservedGeneration: r.Generation}
	if r.Spec.IncludeSecretData {
		s.Status, s.Reason, s.Message = metav1.ConditionTrue, ReasonIncluded, "Secret data and stringData are cached for the Secrets this registry selects (spec.includeSecretData: true)"
	}
	changed = meta.SetStatusCondition(&st.Conditions, s) || changed
	// Keep a stable order so equal statuses serialize equally. Types are
	// unique (the rest of the comparison only makes any duplicate order
	// deterministic), so this need not be a stable sort, whose merges of
	// 2,000 clusters' conditions cost milliseconds a read (measured:
	// docs/benchmarks/fleet.md#figures-behind-code-comments).
	slices.SortFunc(st.Conditions, func(a, b metav1.Condition) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(string(a.Status), string(b.Status)),
			strings.Compare(a.Reason, b.Reason), strings.Compare(a.Message, b.Message))
	})
	return changed
}

// RefreshConditions derives the registry-wide conditions from the
// per-cluster ones already in the status (readers merging per-cluster status
// records call it once after adding them all). It reports a change.
func RefreshConditions(r *ResourceRegistry) bool { return refreshRegistryConditions(r) }
