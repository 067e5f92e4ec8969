package natsserver

import (
	"fmt"
	"sort"
	"strings"

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
	APIPrefix = "$JS.hub.API"
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

// InboxPrefix is the inbox prefix a cluster's collector must use
// (nats.CustomInboxPrefix): push deliveries of the registry watch reach the
// cluster account only on this prefix.
func InboxPrefix(cluster string) string { return "_INBOX_" + cluster }

// grant is one subject a cluster account imports from the hub account.
type grant struct {
	// Subject in the hub account.
	Subject string
	// To is the subject in the cluster account ("" = the same).
	To string
	// Stream is a stream import (hub -> cluster messages, no reply);
	// otherwise a service import (cluster -> hub request, reply routed back).
	Stream bool
	// Streamed marks a service whose request gets several replies.
	Streamed bool
}

// clusterGrants is everything a collector of cluster needs and nothing more:
//   - publish (with acks) its objects and control events, its inventory
//     record and its own registry status keys;
//   - JetStream API on its own stream: info (bind, find orphaned
//     resources), purge (resource removal), last-message gets and an
//     ordered consumer (hydrate). Not create, update or delete: a stream
//     config can source another stream or republish into any subject of
//     the hub, so the hub creates the stream and the collector binds to it;
//   - read the registries bucket (bind, get, watch: an ordered push
//     consumer delivering to the cluster's inbox prefix, with flow control);
//   - bind the inventory and status buckets and read its own status keys.
func clusterGrants(cluster string) []grant {
	s := stream.StreamName(cluster)
	reg := "KV_" + stream.RegistryBucket
	st := "KV_" + stream.RegistryStatusBucket
	api := func(suffix string, streamed bool) grant {
		return grant{Subject: "$JS.API." + suffix, To: APIPrefix + "." + suffix, Streamed: streamed}
	}
	kv := func(subject string) grant { return grant{Subject: subject, To: APIPrefix + "." + subject} }
	return []grant{
		{Subject: stream.SubjectRoot + ".obj." + cluster + ".>"},
		{Subject: stream.SubjectRoot + ".ctl." + cluster + ".>"},
		// KV writes through an API prefix go to "<prefix>.$KV.<bucket>.<key>"
		// (nats.go's convention for buckets in another account or domain).
		kv("$KV." + stream.ClusterBucket + "." + cluster),
		kv("$KV." + stream.RegistryStatusBucket + "." + cluster + ".>"),
		api("STREAM.INFO."+s, false),
		api("STREAM.PURGE."+s, false),
		api("STREAM.MSG.GET."+s, false),
		api("DIRECT.GET."+s, false),
		api("DIRECT.GET."+s+".>", false),
		api("CONSUMER.CREATE."+s+".>", false),
		api("CONSUMER.INFO."+s+".>", false),
		api("CONSUMER.DELETE."+s+".>", false),
		api("CONSUMER.MSG.NEXT."+s+".>", true),
		api("STREAM.INFO."+reg, false),
		api("STREAM.MSG.GET."+reg, false),
		api("DIRECT.GET."+reg+".>", false),
		api("CONSUMER.CREATE."+reg+".>", false),
		api("CONSUMER.INFO."+reg+".>", false),
		api("CONSUMER.DELETE."+reg+".>", false),
		{Subject: "$JS.FC." + reg + ".>"},
		api("STREAM.INFO.KV_"+stream.ClusterBucket, false),
		api("STREAM.INFO."+st, false),
		api("DIRECT.GET."+st+".$KV."+stream.RegistryStatusBucket+"."+cluster+".>", false),
		{Subject: InboxPrefix(cluster) + ".>", Stream: true},
	}
}

// accountsConfig is the accounts block of the server configuration: the
// hub account with JetStream, its user and its exports (each to the one
// cluster account that needs it), and one account per cluster importing them.
func accountsConfig(hubPassword string, users []ClusterUser) (string, error) {
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
			kind, rt := "service", ""
			if g.Stream {
				kind = "stream"
			} else if g.Streamed {
				rt = ", response_type: stream"
			}
			fmt.Fprintf(&b, "      {%s: %q, accounts: [%q]%s}\n", kind, g.Subject, ClusterAccount(u.Cluster), rt)
		}
	}
	b.WriteString("    ]\n  }\n")
	for _, u := range users {
		fmt.Fprintf(&b, "  %q: {\n    users: [{user: %q, password: %q}]\n    imports: [\n", ClusterAccount(u.Cluster), u.Cluster, u.Password)
		for _, g := range clusterGrants(u.Cluster) {
			kind, to := "service", ""
			if g.Stream {
				kind = "stream"
			}
			if g.To != "" {
				to = fmt.Sprintf(", to: %q", g.To)
			}
			fmt.Fprintf(&b, "      {%s: {account: %q, subject: %q}%s}\n", kind, HubAccount, g.Subject, to)
		}
		b.WriteString("    ]\n  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
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
