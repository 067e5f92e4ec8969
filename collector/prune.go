package collector

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// ClusterAnnotation and KarmadaClusterAnnotation name the member cluster
	// an object was cached from (DESIGN.md §3.3). They are set at the source,
	// where the object is already decoded, so no backend or reader has to
	// rewrite the JSON; a value a member object carried itself is overwritten.
	ClusterAnnotation        = "fleetview.io/cluster"
	KarmadaClusterAnnotation = "resource.karmada.io/cached-from-cluster"
	lastAppliedAnnotation    = "kubectl.kubernetes.io/last-applied-configuration"
	// SecretDataAnnotation marks a Secret whose data was not cached, so a
	// reader can tell "no data" from "data withheld".
	SecretDataAnnotation = "fleetview.io/secret-data"
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// prune drops what a cache must not hold or does not need. The collector owns
// the objects its reflectors decode (there is no shared informer cache), so
// pruning in place is safe.
func prune(u *unstructured.Unstructured, cluster string, gvr schema.GroupVersionResource, keepSecretData bool) {
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, lastAppliedAnnotation)
	ann[ClusterAnnotation] = cluster
	ann[KarmadaClusterAnnotation] = cluster
	u.SetAnnotations(ann)
	if gvr == secretsGVR && !keepSecretData {
		_, hasData := u.Object["data"]
		_, hasString := u.Object["stringData"]
		delete(u.Object, "data")
		delete(u.Object, "stringData")
		if hasData || hasString {
			ann := u.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[SecretDataAnnotation] = "stripped"
			u.SetAnnotations(ann)
		}
	}
}
