package natsnames

import "errors"

var (
	// ErrInvalidReplicas is returned (by ValidateReplicas) for a replica
	// count JetStream cannot keep or fleetview does not use.
	ErrInvalidReplicas = errors.New("invalid stream replica count")
	// ErrHubQuota is returned (by HubQuotaError) for a request the hub
	// refused because the cluster holds its share of a resource the hub
	// shares between clusters (consumers, status keys, value sizes). The
	// hub's guard answers with this text, which is how the collector,
	// seeing only a JetStream API error, recognizes it.
	ErrHubQuota = errors.New("fleetview hub quota exceeded")
)
