package relations

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// builtin are the kinds references name, with their resources and scope:
// a reference to an object no cluster has sent (a Secret a registry does
// not cache) is still judged by its resource when a caller's visibility
// is applied.
var builtin = map[schema.GroupKind]struct {
	resource  string
	clustered bool
}{
	{Kind: "Pod"}:                                                     {"pods", false},
	{Kind: "ConfigMap"}:                                               {"configmaps", false},
	{Kind: "Secret"}:                                                  {"secrets", false},
	{Kind: "Service"}:                                                 {"services", false},
	{Kind: "ServiceAccount"}:                                          {"serviceaccounts", false},
	{Kind: "PersistentVolumeClaim"}:                                   {"persistentvolumeclaims", false},
	{Kind: "PersistentVolume"}:                                        {"persistentvolumes", true},
	{Kind: "Node"}:                                                    {"nodes", true},
	{Kind: "Namespace"}:                                               {"namespaces", true},
	{Group: "apps", Kind: "Deployment"}:                               {"deployments", false},
	{Group: "apps", Kind: "ReplicaSet"}:                               {"replicasets", false},
	{Group: "apps", Kind: "StatefulSet"}:                              {"statefulsets", false},
	{Group: "apps", Kind: "DaemonSet"}:                                {"daemonsets", false},
	{Group: "batch", Kind: "Job"}:                                     {"jobs", false},
	{Group: "batch", Kind: "CronJob"}:                                 {"cronjobs", false},
	{Group: "networking.k8s.io", Kind: "Ingress"}:                     {"ingresses", false},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:         {"clusterroles", true},
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: {"customresourcedefinitions", true},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}: {"validatingwebhookconfigurations", true},
}

// ClusterScoped reports whether a built-in kind has no namespace, so a
// reference to it from a namespaced object names no namespace.
func ClusterScoped(group, kind string) bool {
	return builtin[schema.GroupKind{Group: group, Kind: kind}].clustered
}

// BuiltinResource is the resource of a built-in kind, or false.
func BuiltinResource(group, kind string) (string, bool) {
	b, ok := builtin[schema.GroupKind{Group: group, Kind: kind}]
	return b.resource, ok
}

// BuiltinKinds are the built-in kinds named kind, case-insensitively, in
// group (any group when group is empty).
func BuiltinKinds(group, kind string) []schema.GroupKind {
	var out []schema.GroupKind
	for gk := range builtin {
		if strings.EqualFold(gk.Kind, kind) && (group == "" || gk.Group == group) {
			out = append(out, gk)
		}
	}
	return out
}
