package natsserver

import "errors"

// ErrNotReady is returned when the server did not accept connections in time.
var ErrNotReady = errors.New("embedded NATS server not ready")
