// Package relay carries HTTP requests from the hub to one member cluster's
// collector over NATS, and the collector's answers back (issue #30: acting
// on a member through fleetview). It owns the request channel's protocol:
// frames on the cluster's own subjects (natsnames.ActRequest and
// natsnames.ActResponse, which the per-cluster accounts of internal/natsserver
// let only the hub send and only that cluster's collector answer), request
// and response bodies streamed in chunks with a window of unacknowledged
// chunks (flow control: a slow reader holds at most Window chunks of the
// other side's memory), a size limit on each body, a deadline per request,
// keep-alives that turn a vanished peer into an error instead of a hang (the
// collector sends them a third of the hub's idle timeout apart, which each
// request carries, at most its own period), and cancellation when the hub's
// client goes away.
//
// Client (client.go) is the hub's side: Do sends one request and returns
// the answer's status and headers with its body as a stream; concurrent
// requests per cluster are bounded. Server (server.go) is the collector's
// side: it reads its cluster's requests and serves each through an
// http.Handler (the collector's impersonating proxy), with the caller the
// hub authenticated in the request's context (CallerFrom).
//
// A request travels as a typed Kubernetes request (internal/kubepath), never
// as a path string: the server refuses one that does not validate, names
// another cluster, or whose method and query are another verb, and builds
// the handler's URL from its fields (TargetFrom gives the handler the
// typed request itself). What is forwarded, and as whom, is decided by its
// users (queryapi/kubeapi on the hub, the collector on the member).
package relay
