package relay

import "errors"

var (
	// ErrNoCollector is returned when the cluster's collector does not
	// take a request in time: not connected, or not serving the channel
	// (its --act-through is off).
	ErrNoCollector = errors.New("the cluster's collector did not take the request (not connected, or act-through is off on it)")
	// ErrCollectorGone is returned when the collector stops answering a
	// request it took (it died, or lost its connection).
	ErrCollectorGone = errors.New("the cluster's collector stopped answering")
	// ErrBusy is returned when a cluster already has as many requests in
	// flight as it may.
	ErrBusy = errors.New("too many requests in flight to this cluster")
	// ErrTooLarge is returned when a body exceeds its limit.
	ErrTooLarge = errors.New("body exceeds the request channel's limit")
	// ErrProtocol is returned for a frame out of order or unknown: a lost
	// frame, or a peer that does not follow the protocol.
	ErrProtocol = errors.New("request channel protocol error")
	// ErrRefused is returned when the collector refused the request
	// before serving it (its message follows).
	ErrRefused = errors.New("the collector refused the request")
)

// ErrHubGone is returned on the collector's side when the hub stops
// reading or sending a request's body.
var ErrHubGone = errors.New("the hub stopped following the request")

// ErrTimeout is returned when a request outlives its deadline.
var ErrTimeout = errors.New("the forwarded request took longer than its limit")
