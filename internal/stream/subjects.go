package stream

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
)

// groupToken encodes an API group as one subject token, the core group as
// kubepath.CoreGroupName. Groups are DNS subdomains: they may hold dots
// (token separators) but never '_'.
func groupToken(group string) string {
	return strings.ReplaceAll(kubepath.GroupName(group), ".", "_")
}

func groupFromToken(tok string) string {
	return kubepath.GroupFromName(strings.ReplaceAll(tok, "_", "."))
}

// ResourceToken is the "<group>.<version>.<resource>" part of a subject.
func ResourceToken(gvr schema.GroupVersionResource) string {
	return groupToken(gvr.Group) + "." + gvr.Version + "." + gvr.Resource
}

// ObjectSubject is where the current state of one object lives:
// fv.obj.<cluster>.<group>.<version>.<resource>.<uid>.
func ObjectSubject(cluster string, gvr schema.GroupVersionResource, uid string) string {
	return SubjectRoot + ".obj." + cluster + "." + ResourceToken(gvr) + "." + uid
}

// ResourceFilter matches every object subject of one resource in a cluster.
func ResourceFilter(cluster string, gvr schema.GroupVersionResource) string {
	return SubjectRoot + ".obj." + cluster + "." + ResourceToken(gvr) + ".*"
}

// ClusterObjects matches every object subject of a cluster.
func ClusterObjects(cluster string) string { return SubjectRoot + ".obj." + cluster + ".>" }

// ClusterControls matches every control subject of a cluster.
func ClusterControls(cluster string) string { return SubjectRoot + ".ctl." + cluster + ".>" }

// ClusterSubjects are the subjects of a cluster's stream: its objects and
// its control records. A collector may publish into these only.
func ClusterSubjects(cluster string) []string {
	return []string{ClusterObjects(cluster), ClusterControls(cluster)}
}

// AllObjects matches every cluster's object subjects: a stream listed by it
// is a cluster stream.
const AllObjects = SubjectRoot + ".obj.>"

// DeadSubject is the dead-letter subject of the materializer called name.
func DeadSubject(name string) string { return SubjectRoot + ".dead." + name }

// VersionSubject is the subject of VersionStream's messages.
const VersionSubject = SubjectRoot + ".query.versions"

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

// KVStream is the stream behind the key-value bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is where key lives in bucket; KVSubject(bucket, ">") matches
// every key.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// ControlSubject carries sync markers and removal records of one resource.
// It shares the cluster stream so consumers see it in order with the objects.
func ControlSubject(cluster string, gvr schema.GroupVersionResource) string {
	return SubjectRoot + ".ctl." + cluster + "." + ResourceToken(gvr)
}

// ParsedSubject is an object or control subject taken apart.
type ParsedSubject struct {
	Control bool
	Cluster string
	GVR     schema.GroupVersionResource
	UID     string
}

// ParseSubject reverses ObjectSubject and ControlSubject. A subject with
// an empty token is refused: neither renders one, and an empty group token
// would otherwise parse as the core group, giving an object a second
// subject (and so a second message in the compacted stream).
func ParseSubject(subj string) (ParsedSubject, error) {
	t := strings.Split(subj, ".")
	if slices.Contains(t, "") {
		return ParsedSubject{}, fmt.Errorf("%w: %q has an empty token", ErrBadSubject, subj)
	}
	switch {
	case len(t) == 7 && t[0] == SubjectRoot && t[1] == "obj":
		return ParsedSubject{Cluster: t[2], GVR: schema.GroupVersionResource{Group: groupFromToken(t[3]), Version: t[4], Resource: t[5]}, UID: t[6]}, nil
	case len(t) == 6 && t[0] == SubjectRoot && t[1] == "ctl":
		return ParsedSubject{Control: true, Cluster: t[2], GVR: schema.GroupVersionResource{Group: groupFromToken(t[3]), Version: t[4], Resource: t[5]}}, nil
	}
	return ParsedSubject{}, fmt.Errorf("%w: %q", ErrBadSubject, subj)
}

// Wildcards of a subject filter: Wildcard matches one token, FullWildcard
// (last only) every token after.
const (
	Wildcard     = "*"
	FullWildcard = ">"
)

// KVKeys matches every key of bucket.
func KVKeys(bucket string) string { return KVSubject(bucket, FullWildcard) }

// KVKey is the key a subject of bucket names (KVSubject reversed); ok is
// false for a subject of another bucket.
func KVKey(bucket, subject string) (key string, ok bool) {
	if key, ok = strings.CutPrefix(subject, KVSubject(bucket, "")); !ok {
		return "", false
	}
	return key, true
}

// StatusKey is the RegistryStatusBucket key of cluster's conditions on a
// registry. The cluster comes first so a cluster's credentials can be
// limited to StatusKeys(cluster) whatever the registry names hold.
func StatusKey(cluster, registry string) string { return cluster + "." + registry }

// StatusKeys matches every status key of cluster.
func StatusKeys(cluster string) string { return StatusKey(cluster, FullWildcard) }

// HubAPIPrefix is where a member cluster's account reaches the hub's
// JetStream API (jetstream.NewWithAPIPrefix): its account imports the
// requests it may make under this prefix instead of JSAPIPrefix.
const HubAPIPrefix = "$JS.hub.API"

// HubAPISubject is subject, a JetStream API request (APISubject) or a KV
// write (KVSubject), as a member cluster's account sends it: under
// HubAPIPrefix. nats.go sends a KV write through an API prefix to
// "<prefix>.$KV.<bucket>.<key>".
func HubAPISubject(subject string) string {
	return HubAPIPrefix + "." + strings.TrimPrefix(subject, JSAPIPrefix+".")
}

// InboxPrefix is the inbox prefix of a cluster's collector
// (nats.CustomInboxPrefix): the replies to its requests arrive under it.
func InboxPrefix(cluster string) string { return "_INBOX_" + cluster }

// GuardPrefix starts the subject under which the hub's guard receives a
// cluster's guarded request: GuardPrefix(cluster) followed by the request's
// JetStream subject. Only that cluster's account imports it, so the
// cluster token names the requester.
func GuardPrefix(cluster string) string { return "_FV_GUARD." + cluster + "." }

// Inboxes matches every inbox of a cluster's collector.
func Inboxes(cluster string) string { return InboxPrefix(cluster) + "." + FullWildcard }
