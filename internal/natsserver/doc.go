// Package natsserver runs an embedded NATS JetStream server in-process, for
// `fleetview up`, the helm chart's single-pod mode and every test that needs
// real NATS. It owns server options only; streams are created by their
// writers (internal/stream defines them).
package natsserver
