// Package app composes the components into the fleetview subcommands: option
// structs with flags and Validate (every error at once), then Run(ctx) that
// runs NATS, the stores, collectors, the materializer and the query API as
// internal/lifecycle groups, started and stopped in the order each
// subcommand states beside them (lifecycle.go names the groups). A file per server subcommand (serve.go,
// up.go, whose options embed serve's; collector.go, rebuild.go)
// and per option group they share (auth, nats, natsclient, natscluster,
// opensearch, kube, limits, metrics, memory); jetstream.go waits for and
// retries JetStream while a NATS cluster settles. The embedded NATS server's
// configuration is read, and its clients' credentials built, by
// internal/natsserver: the root maps flags onto its Config and wires what it
// starts. cmd/fleetview only builds the cobra commands and calls into here;
// the command-line clients of a running fleetview are package cli's.
package app
