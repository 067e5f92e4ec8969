// Package natstest starts a real embedded JetStream server for tests, with
// its connection and JetStream context, all cleaned up with the test. It
// exists so every package's tests use real NATS the same way.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsserver"
)

// Start runs a server on port (0 or -1: any free port) with a temporary
// store, connects to it, and stops both when the test ends.
func Start(tb testing.TB, port int) (*natsserver.Server, *nats.Conn, jetstream.JetStream) {
	tb.Helper()
	if port == 0 {
		port = -1
	}
	ns, err := natsserver.Start(natsserver.Options{StoreDir: tb.TempDir(), Port: port})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return ns, nc, js
}
