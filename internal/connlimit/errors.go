package connlimit

import "errors"

var (
	// ErrServerFull refuses a connection over the cap of all connections.
	ErrServerFull = errors.New("too many connections to the server")
	// ErrClientFull refuses a connection over the cap of one client
	// address.
	ErrClientFull = errors.New("too many connections from this client")
	// ErrRequestTimeout is a request whose body did not arrive within the
	// read timeout.
	ErrRequestTimeout = errors.New("request timeout")
)

// errNoCloseWrite: the connection beneath cannot half-close.
var errNoCloseWrite = errors.New("connlimit: the connection cannot half-close")
