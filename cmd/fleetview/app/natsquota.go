package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/internal/natsserver"
)

// NATSCollectorQuotaOptions are the per-cluster quotas of the embedded NATS
// server with --nats-users-file: each member cluster's collector credential
// may cost the hub at most this share of what the clusters share (the
// registries stream's consumers, the status and inventory buckets,
// connections, subscriptions, the hub's request guard). Beyond them the
// collector's request is refused with a clear error, counted in
// fleetview_nats_guard_refused_total and in the collector's
// fleetview_collector_hub_quota_refused_total and inventory record.
type NATSCollectorQuotaOptions struct {
	Quotas natsserver.Quotas
}

// quotaFlag is one quota flag and the field it sets.
type quotaFlag struct {
	name, help string
	v          *int
	def        int
}

func (o *NATSCollectorQuotaOptions) flags(d natsserver.Quotas) []quotaFlag {
	q := &o.Quotas
	return []quotaFlag{
		{"nats-collector-registry-consumers", "consumers one member cluster's collector may hold at once on the registries stream every cluster and the hub share (the server allows 1000 in all; a collector uses 1-2)", &q.RegistryConsumers, d.RegistryConsumers},
		{"nats-collector-stream-consumers", "consumers one member cluster's collector may hold at once on its own stream (hydration uses one per cached resource at start)", &q.StreamConsumers, d.StreamConsumers},
		{"nats-collector-consumer-request-bytes", "largest consumer create request a collector may send, in bytes", &q.ConsumerRequestBytes, d.ConsumerRequestBytes},
		{"nats-collector-status-value-bytes", "largest registry status value (a cluster's conditions for one registry) a collector may write, in bytes; status keys are also limited to <cluster>.<registry> of registries that exist", &q.StatusValueBytes, d.StatusValueBytes},
		{"nats-collector-inventory-value-bytes", "largest inventory record a collector may write, in bytes", &q.InventoryValueBytes, d.InventoryValueBytes},
		{"nats-collector-connections", "NATS connections one member cluster's credential may hold at once (nats-server account limit; a collector uses 1)", &q.Connections, d.Connections},
		{"nats-collector-subscriptions", "NATS subscriptions per connection of a member cluster's credential (nats-server account limit)", &q.Subscriptions, d.Subscriptions},
		{"nats-collector-guard-queue-bytes", "bytes of one member cluster's guarded requests (consumer creates, KV writes) the hub queues; beyond them that cluster's requests are dropped and retried, no other cluster's", &q.GuardQueueBytes, d.GuardQueueBytes},
		{"nats-collector-guard-queue-requests", "guarded requests of one member cluster the hub queues (see --nats-collector-guard-queue-bytes)", &q.GuardQueueRequests, d.GuardQueueRequests},
	}
}

// AddFlags registers the flags.
func (o *NATSCollectorQuotaOptions) AddFlags(fs *pflag.FlagSet) {
	for _, f := range o.flags(natsserver.DefaultQuotas()) {
		fs.IntVar(f.v, f.name, f.def, f.help)
	}
}

// Validate reports every problem at once, naming the flag. Zero (options
// built without their flags) takes the default.
func (o *NATSCollectorQuotaOptions) Validate() []error {
	var errs []error
	for _, f := range o.flags(natsserver.DefaultQuotas()) {
		if *f.v == 0 {
			continue
		}
		// One quota at a time against the defaults, so the error names
		// this flag; natsserver owns the ranges.
		if err := (&NATSCollectorQuotaOptions{}).single(f.name, *f.v).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%w: --%s %d: %v", ErrInvalidOptions, f.name, *f.v, err))
		}
	}
	return errs
}

// single is the default quotas with the one named flag's quota set to v.
func (o *NATSCollectorQuotaOptions) single(name string, v int) natsserver.Quotas {
	o.Quotas = natsserver.DefaultQuotas()
	for _, f := range o.flags(o.Quotas) {
		if f.name == name {
			*f.v = v
		}
	}
	return o.Quotas
}

// guardRefusals is fleetview_nats_guard_refused_total: the requests of
// member clusters' collectors the hub refused or dropped, by cluster and
// reason (natsserver.Reason*). Connections and subscriptions beyond their
// quotas are refused by nats-server itself and show in its log, not here.
func guardRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetview_nats_guard_refused_total",
		Help: "Requests of a member cluster's collector the hub's NATS guard refused (forbidden, or beyond the cluster's quota) or dropped (queue full), by cluster and reason.",
	}, []string{"cluster", "reason"})
}
