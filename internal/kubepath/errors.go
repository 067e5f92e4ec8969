package kubepath

import "errors"

var (
	// ErrMalformed is returned for a path that is not a well-formed
	// Kubernetes API path (the hub answers 400).
	ErrMalformed = errors.New("not a well-formed Kubernetes API path")
	// ErrNotAPI is returned for a path outside /api, /apis, /openapi and
	// /version (the hub answers 404: nothing is served there).
	ErrNotAPI = errors.New("not a Kubernetes API path")
)
