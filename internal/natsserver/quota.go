package natsserver

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/stream"
)

// Quotas bound what one member cluster's collector credential can cost the
// hub: every resource the hub shares between clusters (the registries
// stream's consumers, the status and inventory buckets, connections,
// subscriptions, the guard's queue) gets a fixed per-cluster share, so a
// compromised or runaway collector exhausts its own share and nothing of
// the other clusters' or the hub's own.
//
// Connections and subscriptions are nats-server's own account limits
// (limits {max_connections, max_subscriptions} of the cluster's account);
// the rest the guard checks, since they are in request bodies and KV
// keys, which no server limit sees.
type Quotas struct {
	// RegistryConsumers is how many consumers one cluster may hold at
	// once on the registries stream, which every collector and the hub
	// share (the server caps a stream at 1000 in all). A collector holds
	// them only while it reads every registry (at start, and when its
	// follower cannot trust its copy: store.Follower), one or two (an
	// ordered consumer makes a new one for each fetch and deletes the
	// last); it follows changes on the republish, with no consumer.
	RegistryConsumers int
	// StreamConsumers is how many consumers one cluster may hold on its
	// own stream (hydration makes one per resource at start).
	StreamConsumers int
	// ConsumerRequestBytes bounds a consumer create request's body; an
	// ordered consumer's is a few hundred bytes.
	ConsumerRequestBytes int
	// StatusValueBytes bounds one registry status value (a cluster's
	// conditions for one registry).
	StatusValueBytes int
	// InventoryValueBytes bounds a cluster's inventory record.
	InventoryValueBytes int
	// Connections and Subscriptions bound the cluster's account; a
	// collector uses one connection and a handful of subscriptions.
	Connections   int
	Subscriptions int
	// GuardQueueBytes and GuardQueueRequests bound the guard's queue of one
	// cluster's requests not yet handled: beyond them the server drops
	// that cluster's requests (the collector's request times out and it
	// retries), never another cluster's, and hub memory stays bounded.
	GuardQueueBytes    int
	GuardQueueRequests int
}

// DefaultQuotas are the quotas fleetview uses unless told otherwise.
func DefaultQuotas() Quotas {
	return Quotas{
		RegistryConsumers:    8,
		StreamConsumers:      64,
		ConsumerRequestBytes: 16 << 10,
		StatusValueBytes:     128 << 10,
		InventoryValueBytes:  1 << 20,
		Connections:          8,
		Subscriptions:        1024,
		GuardQueueBytes:      8 << 20,
		GuardQueueRequests:   4096,
	}
}

// withDefaults fills the zero fields (quotas built without flags).
func (q Quotas) withDefaults() Quotas {
	d := DefaultQuotas()
	for _, f := range []struct{ v, d *int }{
		{&q.RegistryConsumers, &d.RegistryConsumers}, {&q.StreamConsumers, &d.StreamConsumers},
		{&q.ConsumerRequestBytes, &d.ConsumerRequestBytes}, {&q.StatusValueBytes, &d.StatusValueBytes},
		{&q.InventoryValueBytes, &d.InventoryValueBytes}, {&q.Connections, &d.Connections},
		{&q.Subscriptions, &d.Subscriptions}, {&q.GuardQueueBytes, &d.GuardQueueBytes},
		{&q.GuardQueueRequests, &d.GuardQueueRequests},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return q
}

// Validate reports the first quota that cannot be applied. Every quota is
// a positive number: "unlimited" is what the quotas exist to prevent.
func (q Quotas) Validate() error {
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{
		// The server caps a stream at 1000 consumers; a share of all of
		// them is no quota.
		{"registry consumers", q.RegistryConsumers, 100},
		{"stream consumers", q.StreamConsumers, 1000},
		{"consumer request bytes", q.ConsumerRequestBytes, 1 << 20},
		// A KV value is one message: at most the server's max payload.
		{"status value bytes", q.StatusValueBytes, stream.MaxPayload},
		{"inventory value bytes", q.InventoryValueBytes, stream.MaxPayload},
		{"connections", q.Connections, 1 << 16},
		{"subscriptions", q.Subscriptions, 1 << 20},
		{"guard queue bytes", q.GuardQueueBytes, 1 << 30},
		{"guard queue requests", q.GuardQueueRequests, 1 << 20},
	} {
		if f.v <= 0 || f.v > f.max {
			return fmt.Errorf("%w: %s %d (want 1..%d)", ErrInvalidQuota, f.name, f.v, f.max)
		}
	}
	return nil
}

// Refusal reasons, the reason label of the guard's refusal counter.
const (
	// ReasonForbidden: a request the cluster's credential may never make.
	ReasonForbidden = "forbidden"
	// ReasonConsumers: the cluster holds its share of a stream's consumers.
	ReasonConsumers = "consumers"
	// ReasonRequestSize: a consumer request body beyond its bound.
	ReasonRequestSize = "request_size"
	// ReasonStatusKey: a status key for no registry that exists.
	ReasonStatusKey = "status_key"
	// ReasonValueSize: a status or inventory value beyond its bound.
	ReasonValueSize = "value_size"
	// ReasonQueue: requests the server dropped because the cluster's
	// guard queue was full.
	ReasonQueue = "queue"
)
