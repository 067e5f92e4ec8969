package stream

import "errors"

var (
	// ErrInvalidName is returned for a cluster or resource name that cannot be
	// encoded into a subject token.
	ErrInvalidName = errors.New("invalid name")
	// ErrBadSubject is returned when a subject does not follow the layout.
	ErrBadSubject = errors.New("subject does not follow the fleetview layout")
	// ErrBadEvent is returned for a payload that is not a valid ResourceEvent.
	ErrBadEvent = errors.New("invalid resource event")
	// ErrQuotaExceeded is returned (by QuotaError) for a publish refused
	// because the cluster's stream holds its byte quota.
	ErrQuotaExceeded = errors.New("the cluster's stream reached its byte quota (--stream-max-bytes)")
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
