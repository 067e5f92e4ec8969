// Package cli owns the command-line clients of a running fleetview: the
// `fleetview registry` commands, which talk to the query API's gRPC
// RegistryService, and `fleetview kubeconfig`, which writes a kubeconfig
// for kubectl from the clusters the API reports. The servers' wiring is
// package app's.
package cli
