// Package app composes the components into the fleetview subcommands: option
// structs with flags and Validate (every error at once), then Run(ctx) that
// wires NATS, backends, collectors, the materializer and the query API and
// shuts them down in a stated order. cmd/fleetview only parses flags and
// calls into here.
package app
