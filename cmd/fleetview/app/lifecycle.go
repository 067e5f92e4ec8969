package app

import (
	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/lifecycle"
)

// The groups up, serve and collector run their components in
// (internal/lifecycle): each command states its start order in its groups
// and its stop order beside them.
const (
	// groupNATS is the NATS connection (and up's embedded server): it
	// starts first and stops last, since every other component sends or
	// drains through it.
	groupNATS = "nats"
	// groupStore is the materializers and the stores they write.
	groupStore = "store"
	// groupMetrics is the metrics and profiles server.
	groupMetrics = "metrics"
	// groupAPI is the query API.
	groupAPI = "api"
	// groupCollectors is the collectors (up's in-process ones, or the
	// collector command's one) with their act-through servers.
	groupCollectors = "collectors"
	// groupActThrough is the collector command's act-through server,
	// serving the hub's forwarded requests.
	groupActThrough = "act-through"
)

// closeNATS holds nc open until its group stops.
func closeNATS(nc *nats.Conn) lifecycle.Runnable {
	return lifecycle.Closer(func() error { nc.Close(); return nil })
}
