// Package natsserver runs an embedded NATS JetStream server in-process, for
// `fleetview up`, the helm chart's single-pod mode and every test that needs
// real NATS. It owns server options and client authentication: a shared
// token, or per-cluster accounts (accounts.go) that limit each collector to
// its own stream and keys, with the guard (guard.go) checking the requests
// whose danger is in a body or a header rather than the subject. Streams are created by their writers
// (internal/stream defines them), or by the hub when collectors may not.
package natsserver
