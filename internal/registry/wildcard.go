package registry

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Wildcard spells "every" in a selector's apiVersion ("*", "group/*") and
// kind ("*").
const Wildcard = "*"

// CoreGroupName spells the core ("") API group in a wildcard's apiVersion
// ("core/*") and in an exclude entry. No other group can be named "core":
// a CRD's group must contain a dot, and no built-in group is called that.
const CoreGroupName = "core"

// DefaultExclusion is a kind a wildcard leaves out unless a selector names
// it, and why.
type DefaultExclusion struct {
	GroupKind schema.GroupKind
	Why       string
}

// DefaultExclusions are the kinds "every kind" leaves out. Each costs a
// fleet more than it tells: a cache holds the objects of every member, so a
// kind whose objects change many times a second in every cluster (or which
// every cluster already keeps for an hour) would dominate the streams, the
// store and the hub's memory. Naming one in a selector of its own caches
// it. Kinds that cannot be listed and watched are never cached (the
// collector reads the verbs each member's discovery reports), and Secrets
// are cached metadata-only unless includeSecretData says otherwise, as for
// any selector.
// A new slice on every call: the list is data, not state anyone may edit.
func DefaultExclusions() []DefaultExclusion {
	return []DefaultExclusion{
		{schema.GroupKind{Group: "", Kind: "Event"}, "high churn: every cluster writes events continuously and keeps them an hour"},
		{schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "high churn: the same events as core Events"},
		{schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, "high churn: leader election and node heartbeats renew leases every few seconds"},
	}
}

// defaultExcluded returns why gk is left out of wildcards, or "".
func defaultExcluded(gk schema.GroupKind) string {
	for _, d := range DefaultExclusions() {
		if d.GroupKind == gk {
			return d.Why
		}
	}
	return ""
}

// IsWildcard reports whether s selects kinds by pattern rather than one
// group, version and kind.
func (s ResourceSelector) IsWildcard() bool {
	return s.Kind == Wildcard || s.APIVersion == Wildcard || strings.HasSuffix(s.APIVersion, "/"+Wildcard)
}

// wildcardGroup returns the group a wildcard's apiVersion names, and
// whether it names every group. For "group/version" (a wildcard kind at
// one version) it is that version's group.
func (s ResourceSelector) wildcardGroup() (group string, every bool) {
	if s.APIVersion == Wildcard {
		return "", true
	}
	if g, ok := strings.CutSuffix(s.APIVersion, "/"+Wildcard); ok {
		if g == CoreGroupName {
			return "", false
		}
		return g, false
	}
	return schema.FromAPIVersionAndKind(s.APIVersion, "").Group, false
}

// exactVersion is the version a wildcard kind at one apiVersion
// ("apps/v1", kind "*") is bound to, or "" when any version goes.
func (s ResourceSelector) exactVersion() string {
	if s.APIVersion == Wildcard || strings.HasSuffix(s.APIVersion, "/"+Wildcard) {
		return ""
	}
	return schema.FromAPIVersionAndKind(s.APIVersion, "").Version
}

// Selects reports whether s selects the kind gvk. An exact selector selects
// its one group, version and kind (Karmada's semantics). A wildcard selects
// every kind its apiVersion and kind match, at any version unless its
// apiVersion names one (the collector caches each member's preferred
// version), except its excludes, kinds outside custom resources when it
// asks for those only, and the default exclusions when its kind is "*".
// Why says why a matching kind is left out ("" when selected or not
// matched at all): the collector reports it in the registry's status.
func (s ResourceSelector) Selects(gvk schema.GroupVersionKind) (selected bool, why string) {
	if !s.IsWildcard() {
		return s.GroupVersionKind() == gvk, ""
	}
	group, every := s.wildcardGroup()
	if !every && group != gvk.Group {
		return false, ""
	}
	if v := s.exactVersion(); v != "" && v != gvk.Version {
		return false, ""
	}
	if s.Kind != Wildcard && s.Kind != gvk.Kind {
		return false, ""
	}
	gk := gvk.GroupKind()
	for _, x := range s.Exclude {
		if x.matches(gk) {
			return false, "excluded by the selector"
		}
	}
	if s.CustomResources && IsBuiltinGroup(gk.Group) {
		return false, ""
	}
	if s.Kind == Wildcard {
		if why := defaultExcluded(gk); why != "" {
			return false, "left out of wildcards unless named (" + why + ")"
		}
	}
	return true, ""
}

func (x KindRef) matches(gk schema.GroupKind) bool {
	if x.Group != "" {
		g := x.Group
		if g == CoreGroupName {
			g = ""
		}
		if g != gk.Group {
			return false
		}
	}
	return x.Kind == "" || x.Kind == gk.Kind
}

// IsBuiltinGroup reports whether Kubernetes builds group in: client-go's
// scheme registers every built-in group but two, whose kinds (CRDs and
// APIServices) describe the extensions rather than being one. Every other
// group is a CRD's or an aggregated API's.
func IsBuiltinGroup(group string) bool {
	switch group {
	case "apiextensions.k8s.io", "apiregistration.k8s.io":
		return true
	}
	return scheme.Scheme.IsGroupRegistered(group)
}

// AnySelects reports whether any of sels selects gvk.
func AnySelects(sels []ResourceSelector, gvk schema.GroupVersionKind) bool {
	for _, s := range sels {
		if ok, _ := s.Selects(gvk); ok {
			return true
		}
	}
	return false
}
