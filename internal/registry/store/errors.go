package store

import "errors"

// ErrNotFound is returned for a registry that does not exist.
var ErrNotFound = errors.New("registry not found")

// ErrCorrupt is returned for a stored registry that fails validation when
// read back. Apply validates every registry it stores, so one means a write
// that bypassed this package (a credential of the hub, a bug), never bad
// client input: it is not registry.ErrInvalid.
var ErrCorrupt = errors.New("stored registry fails validation")

// ErrNotFollowed is a Follower's answer before its first snapshot.
var ErrNotFollowed = errors.New("registries not read yet")
