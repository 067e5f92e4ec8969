package plugin

import "errors"

var (
	// ErrInvalidOptions wraps a flag or argument the plugin cannot use; the
	// message names it.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrNotFound wraps an object or revision the hub has no record of.
	ErrNotFound = errors.New("not found")
)
