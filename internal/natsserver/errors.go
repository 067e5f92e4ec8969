package natsserver

import (
	"errors"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// ErrNotReady is returned when the server did not accept connections in time.
var ErrNotReady = errors.New("embedded NATS server not ready")

// ErrInvalidCredentials is returned for per-cluster credentials that cannot
// be configured (bad cluster name, duplicate, weak or unquotable password).
var ErrInvalidCredentials = errors.New("invalid NATS credentials")

// ErrRefused is the reason the hub's guard gives a collector for a
// JetStream request its cluster may not make (guard.go).
var ErrRefused = errors.New("refused to a member cluster's collector")

// ErrInvalidCluster is returned for cluster membership the server cannot
// take (no routes, a name NATS cannot carry).
var ErrInvalidCluster = errors.New("invalid NATS cluster configuration")

// ErrInvalidTLS is returned for a TLS configuration the server cannot
// serve with.
var ErrInvalidTLS = errors.New("invalid NATS TLS configuration")

// ErrStoreTooSmall is returned when JetStream's storage cannot hold a
// stream for every member cluster (StreamQuota).
var ErrStoreTooSmall = errors.New("JetStream storage too small for the fleet")

// ErrInvalidQuota is returned for per-cluster quotas the hub cannot apply.
var ErrInvalidQuota = errors.New("invalid per-cluster NATS quota")

// ErrQuota is the reason the guard gives a collector for a request over its
// cluster's share of the hub (Quotas). It is natsnames.ErrHubQuota, so the
// collector, which sees only the message, recognizes it (natsnames.HubQuotaError).
var ErrQuota = natsnames.ErrHubQuota
