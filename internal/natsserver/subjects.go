package natsserver

import (
	"strings"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// The subjects of the hub's accounts and guard: JetStream's API as the hub
// and a member cluster's account spell it, a collector's inboxes, and the
// guard's. Only this package spells them; the names it shares with the
// components are internal/natsnames'.

// JSAPIPrefix prefixes the subjects of JetStream's API requests.
const JSAPIPrefix = "$JS.API"

// APISubject is the subject of JetStream API request op (two tokens, such
// as "CONSUMER.CREATE") with its arguments (a stream, a consumer, a
// filter) as the tokens after it: APISubject("STREAM.INFO", s) is
// $JS.API.STREAM.INFO.<s>.
func APISubject(op string, args ...string) string {
	return strings.Join(append([]string{JSAPIPrefix, op}, args...), ".")
}

// ParseAPISubject splits a JetStream API subject into its request (the two
// tokens after the prefix, "CONSUMER.CREATE") and the tokens after it; ok
// is false for any other subject.
func ParseAPISubject(subject string) (op string, args []string, ok bool) {
	t := strings.Split(subject, ".")
	if len(t) < 4 || t[0]+"."+t[1] != JSAPIPrefix {
		return "", nil, false
	}
	return t[2] + "." + t[3], t[4:], true
}

// HubAPIPrefix is where a member cluster's account reaches the hub's
// JetStream API (jetstream.NewWithAPIPrefix): its account imports the
// requests it may make under this prefix instead of JSAPIPrefix.
const HubAPIPrefix = "$JS.hub.API"

// HubAPISubject is subject, a JetStream API request (APISubject) or a KV
// write (natsnames.KVSubject), as a member cluster's account sends it: under
// HubAPIPrefix. nats.go sends a KV write through an API prefix to
// "<prefix>.$KV.<bucket>.<key>".
func HubAPISubject(subject string) string {
	return HubAPIPrefix + "." + strings.TrimPrefix(subject, JSAPIPrefix+".")
}

// InboxPrefix is the inbox prefix a cluster's collector uses
// (nats.CustomInboxPrefix). Nothing is delivered to it from the hub but
// the replies of its own requests, which imports route back by
// themselves: a collector has no push consumer, so no delivery path into
// its account. What the hub delivers into a cluster account is its
// requests on the request channel and the registries' republish
// (natsnames.RegistryUpdates), both stream exports, one way.
func InboxPrefix(cluster string) string { return "_INBOX_" + cluster }

// GuardPrefix starts the subject under which the hub's guard receives a
// cluster's guarded request: GuardPrefix(cluster) followed by the request's
// JetStream subject. Only that cluster's account imports it, so the
// cluster token names the requester.
func GuardPrefix(cluster string) string { return "_FV_GUARD." + cluster + "." }

// Inboxes matches every inbox of a cluster's collector.
func Inboxes(cluster string) string { return InboxPrefix(cluster) + "." + natsnames.FullWildcard }
