// Package connlimit owns the bounds of a listener's connections: how many
// may be open at once, in all and per client address (Limiter, Listener),
// and how long one HTTP request may hold its connection (Deadlines). A
// connection costs the process a file descriptor, shared with NATS and
// Badger, and a goroutine with its buffers; an unauthenticated client
// must not be able to hold them without bound.
//
// A connection over a cap is not dropped silently: it is accepted and
// marked refused, the server answers its first request with the refusal
// (HTTP: a Kubernetes-style Status, 503 for the server's cap, 429 for the
// client's; gRPC: UNAVAILABLE or RESOURCE_EXHAUSTED), and it is closed
// after a short linger whatever the client does. Refused connections are
// themselves bounded: past MaxRefusing at once, new ones are closed
// without an answer.
//
// The package knows no API: it never decides what a request may do,
// only how many connections and how much time it gets.
package connlimit
