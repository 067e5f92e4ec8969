// Package integration holds fleetview's end-to-end tests: real
// kube-apiservers and etcd (harness), the real embedded NATS JetStream server,
// and fleetview itself running in-process exactly as `fleetview up` runs.
// Nothing here is faked; a missing component fails the tests loudly.
package integration
