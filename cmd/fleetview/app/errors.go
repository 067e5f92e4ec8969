package app

import "errors"

// ErrInvalidOptions wraps every option validation error.
var ErrInvalidOptions = errors.New("invalid options")
