package relations

// Shared reports whether the object of group, kind and name is one that
// every Pod of its namespace names by default, put there by Kubernetes
// and not by the Pod's author: the kube-root-ca.crt ConfigMap (mounted by
// the projected volume of every service-account token) and the
// namespace's default ServiceAccount (a Pod that names none runs as it).
//
// A relation walk shows such an object as related to what names it, but
// does not walk through it to what else names it (unless the walk starts
// from it): "the other Pods that mount kube-root-ca.crt" is every Pod of
// the namespace, an answer to "which Pods are in this namespace", not to
// "what is related to this Deployment". At 1,000 Pods a namespace it was
// nine tenths of a Deployment's depth-3 answer.
func Shared(group, kind, name string) bool {
	if group != "" {
		return false
	}
	switch kind {
	case "ConfigMap":
		return name == "kube-root-ca.crt"
	case "ServiceAccount":
		return name == "default"
	}
	return false
}
