// Package relations owns what one Kubernetes object says about others: its
// outgoing edges (owner references, and the objects its spec names: a Pod's
// ConfigMaps, Secrets, PVCs, ServiceAccount and Node, an Ingress's
// Services, a PVC's PersistentVolume, an HPA's scale target) and its label
// selector (a Service's, a workload controller's, a PodDisruptionBudget's,
// a NetworkPolicy's), read from the object's JSON when it is applied.
//
// It is pure: no store, no I/O. Stores call Extract as they apply an
// object (or, for an added Pod, hand PodScan the values their own walk of
// it meets) and keep the result (store/badger: key families f/, r/, q/, k/),
// so a relationship question reads indexes instead of decoding objects.
// Selectors are kept as selectors, not as edges to the Pods they select:
// resolving them against current labels at read time costs one label-index
// lookup, while edges kept per Pod would cost every selector of the
// namespace on every Pod change.
//
// Shared names the objects every Pod of a namespace names by default
// (kube-root-ca.crt, the default ServiceAccount): a relation walk answers
// them but does not walk through them to every other Pod of the
// namespace, unless it starts from one (docs/api.md, Relations).
package relations
