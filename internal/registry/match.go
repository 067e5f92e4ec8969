package registry

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClusterInfo is what ClusterAffinity matching needs to know about a member
// cluster. Empty Provider, Region or Zone means the field is not set.
type ClusterInfo struct {
	Name     string
	Labels   map[string]string
	Provider string
	Region   string
	Zone     string
}

// Matches reports whether the cluster is selected, with Karmada's semantics:
// an excluded cluster never matches; otherwise clusterNames (when non-empty),
// labelSelector and fieldSelector must all hold. A nil or empty affinity
// matches every cluster.
//
// A malformed selector matches nothing. Validate rejects such affinities, so
// this only guards unvalidated input, where caching from too few clusters is
// the safe failure and caching from too many is not.
func (a *ClusterAffinity) Matches(c ClusterInfo) bool {
	if a == nil {
		return true
	}
	if slices.Contains(a.Exclude, c.Name) {
		return false
	}
	if len(a.ClusterNames) > 0 && !slices.Contains(a.ClusterNames, c.Name) {
		return false
	}
	if a.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.LabelSelector)
		if err != nil || !sel.Matches(labels.Set(c.Labels)) {
			return false
		}
	}
	if a.FieldSelector != nil {
		for _, expr := range a.FieldSelector.MatchExpressions {
			if !fieldRequirementMatches(expr, c) {
				return false
			}
		}
	}
	return true
}

// fieldRequirementMatches follows Karmada, which treats an empty cluster
// field as absent: In never matches it, NotIn always does.
func fieldRequirementMatches(expr corev1.NodeSelectorRequirement, c ClusterInfo) bool {
	var value string
	switch expr.Key {
	case FieldProvider:
		value = c.Provider
	case FieldRegion:
		value = c.Region
	case FieldZone:
		value = c.Zone
	default:
		return false
	}
	switch expr.Operator {
	case corev1.NodeSelectorOpIn:
		return value != "" && slices.Contains(expr.Values, value)
	case corev1.NodeSelectorOpNotIn:
		return value == "" || !slices.Contains(expr.Values, value)
	default:
		return false
	}
}

// SelectorsFor returns the resource selectors r asks the cluster to cache,
// or nil when r's targetCluster does not select it. The slice is a copy, so
// callers may keep or modify it without touching r.
func (r *ResourceRegistry) SelectorsFor(c ClusterInfo) []ResourceSelector {
	if r == nil || !r.Spec.TargetCluster.Matches(c) || len(r.Spec.ResourceSelectors) == 0 {
		return nil
	}
	return slices.Clone(r.Spec.ResourceSelectors)
}

// GroupVersionKind returns the selector's group, version and kind. An
// apiVersion that does not parse yields an empty group and version; Validate
// rejects those, so validated registries never produce one.
func (s ResourceSelector) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(s.APIVersion, s.Kind)
}
