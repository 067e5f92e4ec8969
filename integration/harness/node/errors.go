package node

import "errors"

// ErrHostChanged is returned by Stop when the machine is not as Start found
// it; the message names every difference.
var ErrHostChanged = errors.New("node: the host differs from before the node started")

// ErrNotReady wraps a component that did not become ready in time.
var ErrNotReady = errors.New("node: not ready")
