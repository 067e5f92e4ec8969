package image

import "errors"

// ErrInvalidOptions wraps every option validation error.
var ErrInvalidOptions = errors.New("invalid image options")

// ErrBuild wraps failures of the go build of a platform's binary.
var ErrBuild = errors.New("building the fleetview binary")
