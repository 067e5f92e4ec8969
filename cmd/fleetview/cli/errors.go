package cli

import "errors"

// ErrInvalidOptions wraps every option validation error of the clients.
var ErrInvalidOptions = errors.New("invalid options")
