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
)
