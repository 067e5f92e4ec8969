// Package natsserver runs an embedded NATS JetStream server in-process, for
// `fleetview up`, the helm chart's single-pod mode and every test that needs
// real NATS. It owns server options, transport security and client
// authentication: TLS required of network clients (optionally with client
// certificates), and a shared token, or per-cluster accounts (accounts.go)
// that limit each collector to its own stream and keys (and, on the request
// channel of internal/relay, to reading the hub's requests for its own
// cluster and answering them: never sending one; and to reading the
// registries' republish, natsnames.RegistryUpdates, the one subject every
// cluster account imports: never publishing there), with the guard
// (guard.go) checking the requests whose danger is in a body or a header
// rather than the subject, and each cluster's quotas (quota.go): its share
// of the consumers (on the registries bucket every cluster shares, counted
// from JetStream's advisories, not a listing per create:
// sharedconsumers.go), keys, value sizes, connections and subscriptions the
// clusters share, so one credential cannot exhaust them. It also makes the
// server a member of a NATS cluster (ClusterOptions: routes authenticated
// by a shared password or mutual TLS, encrypted with TLS), so several
// hubs' embedded servers form one JetStream cluster whose replicated
// streams survive the loss of a member. Start takes Options
// with the secrets and a tls.Config in hand; Config (config.go) is the
// configuration as the hub's flags give it, files and addresses as text,
// and reads it into Options (certificates through internal/tlsfiles, which
// reloads rotated ones), so the composition root only maps flags onto it
// and wires the server. How clients connect is its too (clients.go): the
// hub's own components with ConnectHub (its credentials; in process under
// TLS), a member cluster's collector with ClusterUser.ClientOptions. So is
// StreamQuota (streamquota.go), the share of the server's JetStream store
// each cluster's stream gets. Streams are created by their writers
// (internal/stream defines them), or by the hub when collectors may not.
package natsserver
