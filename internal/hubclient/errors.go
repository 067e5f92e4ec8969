package hubclient

import "errors"

var (
	// ErrInvalidConfig wraps a kubeconfig or flag that names no usable hub.
	ErrInvalidConfig = errors.New("invalid hub connection")
	// ErrUnreachable wraps a request that got no answer.
	ErrUnreachable = errors.New("hub not reachable")
	// ErrStatus wraps a non-2xx answer (see StatusError).
	ErrStatus = errors.New("hub refused the request")
)
