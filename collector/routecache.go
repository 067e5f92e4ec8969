package collector

// releaseHubRouteCache lets the hub's NATS server drop what it remembers
// of this connection's recent publishes, if anything was published since
// the last release.
//
// nats-server keeps, for each client connection, the subjects it last
// published to with the subscriptions each matched (client.go's "L1"
// result cache, up to 512 subjects, not configurable), until a
// subscription of the connection's account changes. A collector publishes
// to one subject per object, so the cache never hits and only holds
// memory: a large share of a 2,000-cluster hub's heap right after a
// fleet-wide change, until each account's subscriptions next changed
// (measured: docs/benchmarks/fleet.md#steady-measured-after-natss-windows-2026-12-05-later).
// A subscription made and dropped changes the account's subscriptions, and
// the server starts the connection's cache afresh at its next publish (a
// sync's marker, the heartbeat's record).
//
// It is only memory, so a failure is ignored: the next release tries
// again. A collector that never releases costs the hub at most the
// server's own bound.
func (c *Collector) releaseHubRouteCache() {
	if !c.published.Swap(false) {
		return
	}
	nc := c.cfg.NATS
	sub, err := nc.SubscribeSync(nc.NewRespInbox())
	if err != nil {
		c.published.Store(true)
		return
	}
	if err := sub.Unsubscribe(); err != nil {
		c.published.Store(true)
	}
}
