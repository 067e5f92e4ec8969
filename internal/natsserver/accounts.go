package natsserver

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

// Per-cluster NATS credentials use accounts, not user permissions in one
// account. With permissions alone every JetStream request and every
// acknowledged publish names a reply subject the server answers to inside
// the shared account, and the server does not check it against the
// requester's permissions: a collector of cluster A sending a stream info
// request with reply subject fv.obj.B.<...> makes the server write into
// cluster B's stream (the test TestReplyInjection shows it). With one account
// per cluster, a collector only reaches the hub account through service
// imports, whose replies the server routes back into the importing account,
// so nothing a collector sends can land on another subject of the hub.
const (
	// HubAccount holds JetStream: every stream and bucket, and the hub's
	// own (privileged) user.
	HubAccount = "FLEETVIEW"
	// HubUser is the privileged user of the hub's in-process components
	// (materializers, query API, registry writes, in-process collectors).
	// Not a DNS label, so no cluster can be named like it.
	HubUser = "_hub"
	// APIPrefix is where a cluster account reaches the hub's JetStream API
	// (jetstream.NewWithAPIPrefix); only the requests listed in
	// clusterGrants are imported under it.
	APIPrefix = HubAPIPrefix
)

// ClusterUser is the credentials of one member cluster's collector. The
// user name is the cluster name, so a credential cannot be mapped to the
// wrong cluster.
type ClusterUser struct {
	Cluster  string
	Password string
}

// ClusterAccount is the NATS account of a member cluster's collector.
func ClusterAccount(cluster string) string { return "CLUSTER_" + cluster }

// grant is one subject a cluster account imports from the hub account.
type grant struct {
	// Subject in the hub account.
	Subject string
	// To is the subject in the cluster account ("" = the same).
	To string
	// Streamed marks a service whose request gets several replies.
	Streamed bool
	// Guarded requests are checked by the hub's guard (guard.go) before
	// they reach Subject: the hub exports guardSubject(cluster, Subject)
	// instead, which only the guard reads.
	Guarded bool
	// Stored publishes go to the cluster's stream, whose JetStream always
	// answers (an ack, an error, or 429 when its ingest queue is full):
	// exported with storedResponseThreshold.
	Stored bool
}

// storedResponseThreshold is how long the hub account keeps the response
// mapping of a stored publish unanswered (nats-server's default: 2
// minutes). Each service export that had a response within its threshold
// walks every pending response of the hub account when the threshold
// passes (serviceExport.checkExpiredResponses), so at 2,000 clusters each
// cluster's publishes had the whole fleet's pending acknowledgements
// walked twice a minute over a sync. JetStream answers every publish, so
// the longer threshold only delays forgetting an answer lost with a
// connection, and a cluster's pacer bounds how many those are.
const storedResponseThreshold = "30m"

// exported is the subject the hub account exports for g.
func (g grant) exported(cluster string) string {
	if g.Guarded {
		return guardSubject(cluster, g.Subject)
	}
	return g.Subject
}

// clusterGrants is everything a collector of cluster needs and nothing more
// (collector/: setup, publish, removeResource, removeOrphans, hydrate,
// watchRegistries, writeStatus, heartbeat):
//   - publish (with acks) its objects and control events: plain imports,
//     the hot path; only its own stream takes these subjects, and that
//     stream refuses rollups and schedules;
//   - answer the hub's forwarded requests (internal/relay) on its own
//     response subjects: a plain import too, not a stream the hub account
//     imports. The hub account imports no stream at all: nats-server
//     checks every new subscription of an account against each of its
//     stream imports (shadow subscriptions), which made every consumer,
//     fetch and request inbox of the hub cost O(clusters), a visible
//     share of the hub's CPU while 1,000 clusters synced (measured:
//     docs/benchmarks/fleet.md#2000-clusters-x-500-pods-the-issues-scale-2026-12-04);
//   - write its inventory record and its own registry status keys, guarded
//     (no rollup, message id, TTL or purge headers);
//   - JetStream API on its own stream: info (bind, find orphaned
//     resources), purge (resource removal) and last-message gets. Not
//     create, update or delete: a stream config can source another stream
//     or republish into any subject of the hub, so the hub creates the
//     stream and the collector binds to it;
//   - ordered pull consumers on its own stream (hydrate) and on the
//     registries stream (a snapshot of the registries; it follows their
//     changes on the republish subject the hub exports, not with a
//     consumer: accountsConfig), guarded:
//     pull only, ephemeral, named with its own prefix, filtered inside
//     what it may read; info and delete of those consumers only, and
//     fetching (not guarded: see guard.go);
//   - bind the three buckets (stream info, guarded: no subject listing) and
//     read its own status keys.
func clusterGrants(cluster string) []grant {
	s := stream.StreamName(cluster)
	reg := natsnames.KVStream(natsnames.RegistryBucket)
	st := natsnames.KVStream(natsnames.RegistryStatusBucket)
	api := func(op string, args ...string) grant {
		sub := APISubject(op, args...)
		return grant{Subject: sub, To: HubAPISubject(sub)}
	}
	next := func(op string, args ...string) grant {
		sub := APISubject(op, args...)
		return grant{Subject: sub, To: HubAPISubject(sub), Streamed: true}
	}
	guarded := func(op string, args ...string) grant {
		sub := APISubject(op, args...)
		return grant{Subject: sub, To: HubAPISubject(sub), Guarded: true}
	}
	// KV writes through an API prefix go to "<prefix>.$KV.<bucket>.<key>"
	// (nats.go's convention for buckets in another account or domain).
	kv := func(subject string) grant {
		return grant{Subject: subject, To: HubAPISubject(subject), Guarded: true}
	}
	const one, rest = natsnames.Wildcard, natsnames.FullWildcard
	return []grant{
		{Subject: stream.ClusterObjects(cluster), Stored: true},
		{Subject: stream.ClusterControls(cluster), Stored: true},
		{Subject: natsnames.ActResponseTree(cluster)},
		kv(natsnames.KVSubject(natsnames.ClusterBucket, cluster)),
		kv(natsnames.KVSubject(natsnames.RegistryStatusBucket, natsnames.StatusKeys(cluster))),
		api("STREAM.INFO", s),
		api("STREAM.PURGE", s),
		api("STREAM.MSG.GET", s),
		api("DIRECT.GET", s),
		api("DIRECT.GET", s, rest),
		guarded("CONSUMER.CREATE", s, rest),
		guarded("CONSUMER.INFO", s, one),
		guarded("CONSUMER.DELETE", s, one),
		next("CONSUMER.MSG.NEXT", s, one),
		guarded("STREAM.INFO", reg),
		guarded("CONSUMER.CREATE", reg, rest),
		guarded("CONSUMER.INFO", reg, one),
		guarded("CONSUMER.DELETE", reg, one),
		next("CONSUMER.MSG.NEXT", reg, one),
		guarded("STREAM.INFO", natsnames.KVStream(natsnames.ClusterBucket)),
		guarded("STREAM.INFO", st),
		api("DIRECT.GET", st, natsnames.KVSubject(natsnames.RegistryStatusBucket, natsnames.StatusKeys(cluster))),
	}
}

// accountsConfig is the accounts block of the server configuration: the
// hub account with JetStream, its user and its exports (each to the one
// cluster account that needs it), and one account per cluster importing them,
// limited to q's connections and subscriptions (the server's own account
// limits: a connection or subscription beyond them is refused by the server).
func accountsConfig(hubPassword string, users []ClusterUser, q Quotas) (string, error) {
	if err := checkSecret(hubPassword); err != nil {
		return "", fmt.Errorf("%w: hub password: %v", ErrInvalidCredentials, err)
	}
	users = append([]ClusterUser(nil), users...)
	sort.Slice(users, func(i, j int) bool { return users[i].Cluster < users[j].Cluster })
	seen := map[string]bool{}
	var b strings.Builder
	b.WriteString("accounts {\n")
	fmt.Fprintf(&b, "  %q: {\n    jetstream: enabled\n    users: [{user: %q, password: %q}]\n    exports: [\n", HubAccount, HubUser, hubPassword)
	for _, u := range users {
		if err := stream.ValidateCluster(u.Cluster); err != nil {
			return "", fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
		}
		if seen[u.Cluster] {
			return "", fmt.Errorf("%w: cluster %s given twice", ErrInvalidCredentials, u.Cluster)
		}
		seen[u.Cluster] = true
		if err := checkSecret(u.Password); err != nil {
			return "", fmt.Errorf("%w: cluster %s: %v", ErrInvalidCredentials, u.Cluster, err)
		}
		for _, g := range clusterGrants(u.Cluster) {
			rt := ""
			if g.Streamed {
				rt = ", response_type: stream"
			}
			if g.Stored {
				rt = fmt.Sprintf(", response_threshold: %q", storedResponseThreshold)
			}
			fmt.Fprintf(&b, "      {service: %q, accounts: [%q]%s}\n", g.exported(u.Cluster), ClusterAccount(u.Cluster), rt)
		}
		// The request channel (issue #30): the hub's requests for this
		// cluster reach its account only, one way.
		fmt.Fprintf(&b, "      {stream: %q, accounts: [%q]}\n", natsnames.ActRequestTree(u.Cluster), ClusterAccount(u.Cluster))
	}
	if len(users) > 0 {
		// The registries' republish (natsnames.RegistryRePublish), one way
		// and read-only, to every cluster: each collector follows the
		// registries with one subscription on it, not a consumer of its
		// own on the shared stream.
		accts := make([]string, len(users))
		for i, u := range users {
			accts[i] = fmt.Sprintf("%q", ClusterAccount(u.Cluster))
		}
		fmt.Fprintf(&b, "      {stream: %q, accounts: [%s]}\n", natsnames.RegistryUpdates, strings.Join(accts, ", "))
	}
	b.WriteString("    ]\n  }\n")
	for _, u := range users {
		fmt.Fprintf(&b, "  %q: {\n    users: [{user: %q, password: %q, permissions: %s}]\n", ClusterAccount(u.Cluster), u.Cluster, u.Password, userPermissions(u.Cluster))
		fmt.Fprintf(&b, "    limits: {max_connections: %d, max_subscriptions: %d}\n    imports: [\n", q.Connections, q.Subscriptions)
		for _, g := range clusterGrants(u.Cluster) {
			to := ""
			if g.To != "" {
				to = fmt.Sprintf(", to: %q", g.To)
			}
			fmt.Fprintf(&b, "      {service: {account: %q, subject: %q}%s}\n", HubAccount, g.exported(u.Cluster), to)
		}
		fmt.Fprintf(&b, "      {stream: {account: %q, subject: %q}}\n", HubAccount, natsnames.ActRequestTree(u.Cluster))
		fmt.Fprintf(&b, "      {stream: {account: %q, subject: %q}}\n", HubAccount, natsnames.RegistryUpdates)
		b.WriteString("    ]\n  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// userPermissions limits a collector's user inside its own account to the
// subjects it imports, to its own inboxes, to the request channel's two
// trees and to the registries' republish: it may read the hub's requests
// for its cluster and answer on its cluster's response subjects, and never
// publish a request; it may read the registries' updates and never publish
// one (a second connection with the same credential must not be able to
// act as the hub towards the collector). The account holds nothing
// else, so this changes nothing today; it keeps a subject added to the
// account later (an import for the hub's own use, a service) from
// reaching the collector by default.
func userPermissions(cluster string) string {
	var pub []string
	for _, g := range clusterGrants(cluster) {
		local := g.To
		if local == "" {
			local = g.Subject
		}
		pub = append(pub, fmt.Sprintf("%q", local))
	}
	return fmt.Sprintf("{publish: {allow: [%s], deny: [%q, %q]}, subscribe: {allow: [%q, %q, %q]}}", strings.Join(pub, ", "),
		natsnames.ActRequestTree(cluster), natsnames.RegistryUpdates, Inboxes(cluster), natsnames.ActRequestTree(cluster), natsnames.RegistryUpdates)
}

// checkSecret keeps passwords long and free of characters that would need
// escaping in the server configuration.
func checkSecret(p string) error {
	if len(p) < 16 {
		return fmt.Errorf("password shorter than 16 characters")
	}
	for _, r := range p {
		if r <= ' ' || r > '~' || r == '"' || r == '\\' || r == '$' {
			return fmt.Errorf("password holds %q: use printable ASCII without quotes, backslashes, '$' or spaces", r)
		}
	}
	return nil
}
