package registry

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Accepted API groups. Both carry the same schema: Karmada's so existing
// karmada-search manifests work verbatim, fleetview's so users who never ran
// Karmada are not asked to name it.
const (
	KarmadaGroup = "search.karmada.io"
	Group        = "fleetview.io"
	Version      = "v1alpha1"
	Kind         = "ResourceRegistry"

	KarmadaAPIVersion = KarmadaGroup + "/" + Version
	APIVersion        = Group + "/" + Version
)

// Keys a FieldSelector may test; the names are Karmada's.
const (
	FieldProvider = "provider"
	FieldRegion   = "region"
	FieldZone     = "zone"
)

// ResourceRegistry says which resources to cache from which member clusters.
// It is cluster-scoped: metadata.namespace must be empty.
type ResourceRegistry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ResourceRegistrySpec   `json:"spec"`
	Status ResourceRegistryStatus `json:"status,omitempty"`
}

// ResourceRegistrySpec is the desired state of a ResourceRegistry.
type ResourceRegistrySpec struct {
	// TargetCluster selects the member clusters to cache from. Decode
	// requires the key to be present; `targetCluster: {}` selects every
	// cluster, so "all clusters" is always an explicit choice.
	TargetCluster ClusterAffinity `json:"targetCluster"`

	// ResourceSelectors lists the resources to cache; at least one.
	ResourceSelectors []ResourceSelector `json:"resourceSelectors"`

	// BackendStore overrides where the cache lives; nil means the default
	// backend.
	BackendStore *BackendStoreConfig `json:"backendStore,omitempty"`

	// IncludeSecretData is a fleetview extension. Secrets are cached
	// metadata-only unless it is true, because a central copy of Secret data
	// bypasses every member cluster's RBAC. It covers only the Secrets this
	// registry selects (its selectors' namespaces, in its target clusters),
	// never those another registry selects.
	IncludeSecretData bool `json:"includeSecretData,omitempty"`
}

// ResourceSelector names one resource type, optionally limited to one
// namespace (Karmada's shape), or, as a fleetview extension, a wildcard:
// every kind of a group or of every group, as each member's discovery
// serves them (wildcard.go).
type ResourceSelector struct {
	// APIVersion is "version" for the core group or "group/version"; a
	// wildcard is "group/*" (every version of one group, the core group
	// spelled "core/*") or "*" (every group). A wildcard caches each kind
	// at the version the member prefers.
	APIVersion string `json:"apiVersion"`
	// Kind is a kind, or "*" for every kind the apiVersion selects.
	Kind string `json:"kind"`
	// Namespace limits the selector to one namespace; empty means all.
	Namespace string `json:"namespace,omitempty"`
	// Namespaces (fleetview) limits the selector to several namespaces,
	// with Namespace if both are set. A wildcard limited to namespaces
	// selects only namespaced kinds.
	Namespaces []string `json:"namespaces,omitempty"`
	// CustomResources (fleetview) limits a wildcard to the kinds of API
	// groups Kubernetes does not build in: CRDs and aggregated APIs.
	CustomResources bool `json:"customResources,omitempty"`
	// Exclude (fleetview) lists kinds a wildcard leaves out.
	Exclude []KindRef `json:"exclude,omitempty"`
}

// KindRef names kinds to leave out of a wildcard: a group's every kind
// (group only), a kind in every group (kind only), or one group's kind.
// The core group is spelled "core", as in a wildcard's apiVersion.
type KindRef struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// BackendStoreConfig selects the backend the cached objects are written to.
type BackendStoreConfig struct {
	OpenSearch *OpenSearchConfig `json:"openSearch,omitempty"`
}

// OpenSearchConfig points at an OpenSearch cluster.
type OpenSearchConfig struct {
	// Addresses are http(s) URLs of OpenSearch nodes; at least one.
	Addresses []string `json:"addresses"`
	// SecretRef names a Secret with `username` and `password` keys. When it
	// is empty or the Secret lacks them, the backend connects without auth.
	SecretRef SecretReference `json:"secretRef,omitempty"`
}

// SecretReference names a Secret in the control plane.
type SecretReference struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ResourceRegistryStatus is the observed state of a ResourceRegistry, e.g.
// which clusters matched and which resources were skipped because a cluster
// does not serve their API.
type ResourceRegistryStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterAffinity selects member clusters. Every condition that is set must
// hold; a nil or empty affinity selects every cluster.
type ClusterAffinity struct {
	// LabelSelector matches the clusters' labels.
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// FieldSelector matches the clusters' provider, region and zone.
	FieldSelector *FieldSelector `json:"fieldSelector,omitempty"`
	// ClusterNames, when non-empty, lists the only clusters that may match.
	ClusterNames []string `json:"clusterNames,omitempty"`
	// Exclude lists clusters that never match, whatever else says.
	Exclude []string `json:"exclude,omitempty"`
}

// FieldSelector matches cluster fields (provider, region, zone). It reuses
// NodeSelectorRequirement as Karmada does; only the In and NotIn operators
// are valid.
type FieldSelector struct {
	MatchExpressions []corev1.NodeSelectorRequirement `json:"matchExpressions,omitempty"`
}
