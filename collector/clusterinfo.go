package collector

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/internal/registry"
)

// Data keys of the cluster-info ConfigMap (Config.ClusterInfoConfigMap).
const (
	InfoKeyProvider = "provider"
	InfoKeyRegion   = "region"
	InfoKeyZone     = "zone"
	// InfoKeyLabels holds "k=v,k2=v2".
	InfoKeyLabels = "labels"
)

// DefaultClusterInfoConfigMap is where a collector looks for its cluster's
// description unless told otherwise.
const DefaultClusterInfoConfigMap = "kube-system/fleetview-cluster-info"

// ParseClusterInfoConfigMap splits a cluster-info ConfigMap reference
// ("namespace/name") and checks both parts are valid Kubernetes names. The
// command line and Config are checked by this one function, so a value the
// flag accepts is never refused by New, and the reverse.
func ParseClusterInfoConfigMap(ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", fmt.Errorf("%w: cluster info ConfigMap %q: want namespace/name", ErrInvalidOptions, ref)
	}
	return namespace, name, nil
}

// mergeClusterInfo fills base (from flags) with the ConfigMap's values: a
// field already set by a flag wins, labels are merged with the flag's value
// winning per key. Invalid labels are skipped and reported, the rest apply.
func mergeClusterInfo(base registry.ClusterInfo, data map[string]string) (registry.ClusterInfo, error) {
	if base.Provider == "" {
		base.Provider = strings.TrimSpace(data[InfoKeyProvider])
	}
	if base.Region == "" {
		base.Region = strings.TrimSpace(data[InfoKeyRegion])
	}
	if base.Zone == "" {
		base.Zone = strings.TrimSpace(data[InfoKeyZone])
	}
	var errs []string
	for _, kv := range strings.Split(data[InfoKeyLabels], ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			errs = append(errs, fmt.Sprintf("labels: %q is not key=value", kv))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("labels: key %q: %s", k, strings.Join(msgs, "; ")))
			continue
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("labels: value %q of %q: %s", v, k, strings.Join(msgs, "; ")))
			continue
		}
		if base.Labels == nil {
			base.Labels = map[string]string{}
		}
		if _, set := base.Labels[k]; !set {
			base.Labels[k] = v
		}
	}
	if len(errs) > 0 {
		return base, fmt.Errorf("%w: %s", ErrInvalidClusterInfo, strings.Join(errs, "; "))
	}
	return base, nil
}
