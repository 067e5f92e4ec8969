// Package hubclient owns the HTTP client of the hub's public REST API
// (/v1/...) that the command-line tools share: `fleetview kubeconfig` and
// the kubectl plugin (cmd/kubectl-fleet). It turns a client-go rest.Config
// (from a kubeconfig, with its tokens, client certificates and CA, or from
// explicit flags) into a client of the API's base URL, and a Kubernetes
// Status answer into an error that says what the hub refused.
//
// The kubeconfig `fleetview kubeconfig` writes points the "fleet" context
// at the hub's base and each member's context at <base>/clusters/<name>;
// the REST API is on the same port under /v1, so a member context's
// client keeps that member as its default cluster.
//
// It must not import a component: it speaks only HTTP to a running hub.
package hubclient
