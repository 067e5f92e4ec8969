package stream

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const (
	// SubjectRoot prefixes every fleetview subject.
	SubjectRoot = "fv"
	// StreamPrefix prefixes the per-cluster stream names.
	StreamPrefix = "FV_"
	// RegistryBucket is the JetStream KV bucket holding ResourceRegistries.
	RegistryBucket = "fv_registries"
	// RegistryStatusBucket holds each cluster's conditions on each registry,
	// key "<cluster>.<registry>": a cluster's credentials can be limited to
	// its own keys, which a status inside the registry value would not allow.
	RegistryStatusBucket = "fv_registry_status"
	// ClusterBucket is the JetStream KV bucket holding the cluster inventory.
	ClusterBucket = "fv_clusters"
	// QueryBucket holds the query API's state shared by its replicas (the
	// key that seals its tokens).
	QueryBucket = "fv_query"
	// CoreGroupToken spells the core ("") API group in a subject.
	CoreGroupToken = "core"
	// DefaultTombstoneTTL keeps a delete long enough for any consumer that is
	// not hopelessly behind, after which the subject disappears entirely.
	DefaultTombstoneTTL = 24 * time.Hour
	// MaxPayload is the NATS max payload fleetview needs: Kubernetes objects
	// may be up to ~1.5 MiB, plus the event envelope.
	MaxPayload = 4 << 20
)

// Validate a cluster name: it becomes a subject token and part of a stream
// name, so it must be a DNS-1123 label (no dots, wildcards or spaces).
func ValidateCluster(cluster string) error {
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		return fmt.Errorf("%w: cluster %q: %s", ErrInvalidName, cluster, strings.Join(errs, "; "))
	}
	return nil
}

// StreamName is the JetStream stream of one member cluster.
func StreamName(cluster string) string {
	return StreamPrefix + strings.ReplaceAll(cluster, "-", "_")
}

// ClusterFromStream reverses StreamName. Cluster names are DNS labels, which
// never contain '_', so the mapping is one-to-one.
func ClusterFromStream(name string) (string, bool) {
	if !strings.HasPrefix(name, StreamPrefix) {
		return "", false
	}
	return strings.ReplaceAll(strings.TrimPrefix(name, StreamPrefix), "_", "-"), true
}

// groupToken encodes an API group as one subject token. Groups are DNS
// subdomains: they may hold dots (token separators) but never '_'.
func groupToken(group string) string {
	if group == "" {
		return CoreGroupToken
	}
	return strings.ReplaceAll(group, ".", "_")
}

func groupFromToken(tok string) string {
	if tok == CoreGroupToken {
		return ""
	}
	return strings.ReplaceAll(tok, "_", ".")
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

// DeadStream holds poison messages of every materializer, one subject per
// materializer name, with the reason in the Fv-Reason header.
const DeadStream = StreamPrefix + "DEAD"

// DeadSubject is the dead-letter subject of the materializer called name.
func DeadSubject(name string) string { return SubjectRoot + ".dead." + name }

// DeadStreamConfig is the dead-letter stream: a week of poison messages,
// each as large as a cluster stream's.
func DeadStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: DeadStream, Subjects: []string{SubjectRoot + ".dead.>"}, Storage: jetstream.FileStorage,
		MaxAge: 7 * 24 * time.Hour, MaxMsgSize: MaxPayload, Replicas: replicas,
	}
}

// VersionStream holds the epochs of the query API's resourceVersions:
// immutable version vectors shared by every replica, an epoch's id being
// its message's stream sequence. Not FV_-prefixed: it is no cluster's.
const VersionStream = "FVQ_VERSIONS"

// VersionSubject is the subject of VersionStream's messages.
const VersionSubject = SubjectRoot + ".query.versions"

// VersionStreamConfig is the epochs' stream: kept for maxAge (a version
// older than the resume age is refused anyway), each epoch up to a
// cluster stream's message size.
func VersionStreamConfig(replicas int, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: VersionStream, Description: "fleetview resourceVersion epochs", Subjects: []string{VersionSubject},
		Storage: jetstream.FileStorage, MaxAge: maxAge, MaxMsgSize: MaxPayload, Replicas: max(replicas, 1), AllowDirect: true,
	}
}

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

// ValidateReplicas checks a replica count for fleetview's streams and
// buckets: 1 (a single server), or 3 or 5 (a JetStream cluster). An even
// count tolerates no more failures than the odd one below it while
// costing a copy more, and JetStream allows at most 5.
func ValidateReplicas(n int) error {
	switch n {
	case 1, 3, 5:
		return nil
	}
	return fmt.Errorf("%w: %d (want 1, 3 or 5)", ErrInvalidReplicas, n)
}

// ReplicasError names what could not be created or updated with the
// asked replica count, and why: a single server refuses more than one
// replica, and a cluster refuses more replicas than it has servers with
// JetStream.
func ReplicasError(what string, replicas int, err error) error {
	if err == nil {
		return nil
	}
	if replicas > 1 {
		return fmt.Errorf("%s with %d replicas (--stream-replicas needs a JetStream cluster of at least that many servers): %w", what, replicas, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EnsureKeyValue creates the bucket of cfg, or updates it to cfg
// (replicas included: JetStream moves a bucket's stream between replica
// counts as it does a cluster stream). cfg.Replicas 0 keeps an existing
// bucket as it is, since an update without a replica count would move it
// to one replica, and creates a missing one with one: for processes that
// use what the hub made (rebuild).
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	what := "open " + cfg.Bucket + " bucket"
	if cfg.Replicas < 1 {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		cfg.Replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, ReplicasError(what, cfg.Replicas, err)
	}
	return kv, nil
}

// DefaultMaxBytes is the default byte quota of one cluster's stream: room
// for a large cluster's current state (150,000 objects of a few KiB) many
// times over. JetStream reserves a stream's MaxBytes against its store
// when the stream is created, so the quota must stay far below the disk.
const DefaultMaxBytes = 1 << 30

// StreamConfig is the configuration of a cluster's stream: a compacted log
// (one message per subject) whose tombstones expire. maxBytes > 0 is the
// stream's byte quota (0: none).
//
// Discard is New: at the quota JetStream refuses the publish that would
// grow the stream ("maximum bytes exceeded", see QuotaError), where Old
// would silently drop the oldest messages, i.e. the current state of the
// objects that changed least recently. Replacing an object's message with
// a smaller one (a tombstone, a shrinking object) still passes at the
// quota, and the
// per-subject limit still replaces each object's previous message
// (DiscardNewPerSubject stays off). Without a quota, New and Old behave
// the same.
func StreamConfig(cluster string, replicas int, maxBytes int64) jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	if maxBytes <= 0 {
		maxBytes = -1 // JetStream's "unlimited"
	}
	return jetstream.StreamConfig{
		Name:              StreamName(cluster),
		Description:       "fleetview objects of member cluster " + cluster,
		Subjects:          ClusterSubjects(cluster),
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxBytes:          maxBytes,
		Discard:           jetstream.DiscardNew,
		AllowMsgTTL:       true,
		Duplicates:        2 * time.Minute,
		MaxMsgSize:        MaxPayload,
		Replicas:          replicas,
		AllowDirect:       true,
	}
}

// EnsureStream creates cluster's stream, or updates it to StreamConfig,
// without ever letting a quota delete what the stream holds: JetStream
// enforces a MaxBytes lowered below the stream's size by dropping its
// oldest messages, the current state of the objects that changed least
// recently. Such a quota is raised to the stream's size instead (growth is
// refused from then on, nothing is lost), and kept is that size; 0 when
// the quota applies as asked.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cluster string, replicas int, maxBytes int64) (kept int64, err error) {
	cfg := StreamConfig(cluster, replicas, maxBytes)
	if maxBytes > 0 {
		st, err := js.Stream(ctx, cfg.Name)
		switch {
		case err == nil:
			if held := int64(st.CachedInfo().State.Bytes); held > maxBytes {
				cfg.MaxBytes, kept = held, held
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return 0, err
		}
	}
	// CreateOrUpdateStream also moves an existing stream to replicas:
	// JetStream adds or removes peers and catches new ones up from the
	// leader, so a hub moved from R1 to R3 keeps what its streams hold.
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return 0, ReplicasError("stream "+cfg.Name, cfg.Replicas, err)
	}
	return kept, nil
}

// QuotaError is err wrapped with ErrQuotaExceeded when it is JetStream
// refusing a publish because the cluster's stream reached its byte quota
// (StreamConfig's maxBytes), else nil. The server answers such a publish
// with a store failure whose description is "maximum bytes exceeded".
func QuotaError(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if (errors.As(err, &apiErr) && strings.Contains(apiErr.Description, maxBytesExceeded)) || strings.Contains(err.Error(), maxBytesExceeded) {
		return fmt.Errorf("%w: %v", ErrQuotaExceeded, err)
	}
	return nil
}

// HubQuotaError returns err wrapped in ErrHubQuota if it is the hub
// refusing a request over the cluster's per-cluster quota, else nil.
func HubQuotaError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrHubQuota) {
		return err
	}
	var apiErr *jetstream.APIError
	if (errors.As(err, &apiErr) && strings.Contains(apiErr.Description, ErrHubQuota.Error())) || strings.Contains(err.Error(), ErrHubQuota.Error()) {
		return hubQuotaErr{err}
	}
	return nil
}

// hubQuotaErr is a refusal over the hub quota: errors.Is ErrHubQuota, and
// its text is the refusal's own, which already says so.
type hubQuotaErr struct{ err error }

func (e hubQuotaErr) Error() string        { return e.err.Error() }
func (e hubQuotaErr) Unwrap() error        { return e.err }
func (e hubQuotaErr) Is(target error) bool { return target == ErrHubQuota }

// maxBytesExceeded is how nats-server describes a publish refused at a
// stream's MaxBytes with Discard New.
const maxBytesExceeded = "maximum bytes exceeded"

// MsgID is the Nats-Msg-Id of an event: the same change published twice is
// stored once. It does not name the cluster: the duplicate window is the
// stream's, and only the cluster's collector and the hub can put messages
// into a cluster's stream (natsserver), so no other cluster can spend an ID
// there; one that could would forge a cluster-scoped ID as easily.
func MsgID(ev *fleetviewv1.ResourceEvent) string {
	if !feed.IsObjectEvent(ev) {
		// Control records are meant to be appended every time.
		return ""
	}
	return ev.GetUid() + "/" + ev.GetResourceVersion() + "/" + ev.GetType().String()
}

// Encode marshals an event.
func Encode(ev *fleetviewv1.ResourceEvent) ([]byte, error) {
	return proto.Marshal(ev)
}

// Decode unmarshals and checks an event against the subject it arrived on.
// The event's Object aliases data, which the caller must not modify after.
func Decode(subj string, data []byte) (*fleetviewv1.ResourceEvent, error) {
	ps, err := ParseSubject(subj)
	if err != nil {
		return nil, err
	}
	ev := &fleetviewv1.ResourceEvent{}
	if err := unmarshalEvent(data, ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	g := ev.GetGvr()
	switch {
	case ev.GetCluster() != ps.Cluster:
		return nil, fmt.Errorf("%w: cluster %q does not match subject %q", ErrBadEvent, ev.GetCluster(), subj)
	case g.GetGroup() != ps.GVR.Group || g.GetVersion() != ps.GVR.Version || g.GetResource() != ps.GVR.Resource:
		return nil, fmt.Errorf("%w: resource %s/%s/%s does not match subject %q", ErrBadEvent, g.GetGroup(), g.GetVersion(), g.GetResource(), subj)
	case !ps.Control && ev.GetUid() != ps.UID:
		return nil, fmt.Errorf("%w: uid %q does not match subject %q", ErrBadEvent, ev.GetUid(), subj)
	case !ps.Control && !feed.IsObjectEvent(ev):
		return nil, fmt.Errorf("%w: type %s on object subject", ErrBadEvent, ev.GetType())
	case ps.Control && ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_SYNCED && ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return nil, fmt.Errorf("%w: type %s on control subject", ErrBadEvent, ev.GetType())
	case ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT && len(ev.GetObject()) == 0:
		return nil, fmt.Errorf("%w: upsert without object", ErrBadEvent)
	case !ps.Control && ev.GetName() == "":
		return nil, fmt.Errorf("%w: object without name", ErrBadEvent)
	}
	if err := checkCells(ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// Bounds of an event's Table cells (ResourceEvent.cells). A member's
// printers write a few short strings per object (a Pod's nine cells are
// about 100 bytes); a CRD's printer columns are JSONPath results, which a
// member cluster's owner controls. Past these bounds the event is refused
// like any other malformed event: the hub answers no cell a member wrote
// unchecked.
const (
	// MaxCellsBytes bounds the cells of one object.
	MaxCellsBytes = 16 << 10
	// MaxColumns bounds a resource's columns (and an object's cells).
	MaxColumns = 64
)

// checkCells refuses cells on anything but an upsert, and cells that are
// not one JSON array of at most MaxColumns values in MaxCellsBytes.
func checkCells(ev *fleetviewv1.ResourceEvent) error {
	c := ev.GetCells()
	if len(c) == 0 {
		return nil
	}
	if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		return fmt.Errorf("%w: cells on a %s event", ErrBadEvent, ev.GetType())
	}
	if len(c) > MaxCellsBytes {
		return fmt.Errorf("%w: cells of %d bytes, more than %d", ErrBadEvent, len(c), MaxCellsBytes)
	}
	var arr [16]rawjson.Span
	spans, err := rawjson.Elements(c, arr[:0])
	if err != nil {
		return fmt.Errorf("%w: cells: %v", ErrBadEvent, err)
	}
	if len(spans) > MaxColumns {
		return fmt.Errorf("%w: %d cells, more than %d", ErrBadEvent, len(spans), MaxColumns)
	}
	return nil
}

// GVR converts the proto form.
func GVR(g *fleetviewv1.GroupVersionResource) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g.GetGroup(), Version: g.GetVersion(), Resource: g.GetResource()}
}

// ProtoGVR converts to the proto form.
func ProtoGVR(g schema.GroupVersionResource) *fleetviewv1.GroupVersionResource {
	return &fleetviewv1.GroupVersionResource{Group: g.Group, Version: g.Version, Resource: g.Resource}
}

// ConsumerPrefix starts the name of every consumer a cluster's collector
// creates. With per-cluster credentials the hub refuses a collector every
// consumer request on a name without its own prefix (natsserver's guard),
// so a collector can neither read from nor delete another cluster's
// consumers or the hub's. Cluster names never hold '_', so no cluster's
// prefix starts another's.
func ConsumerPrefix(cluster string) string { return "fvc_" + cluster + "_" }

// ConsumerNamePrefix is a fresh, unguessable ordered-consumer name prefix
// (jetstream.OrderedConsumerConfig.NamePrefix) for cluster's collector:
// its own prefix, then random characters, so two ordered consumers of one
// collector never share a name.
func ConsumerNamePrefix(cluster string) string { return ConsumerPrefix(cluster) + rand.Text() }

// ConsumerCluster is the cluster whose prefix (ConsumerPrefix) starts a
// consumer's name; ok is false for a name no collector's prefix starts
// (the hub's own consumers).
func ConsumerCluster(name string) (cluster string, ok bool) {
	rest, ok := strings.CutPrefix(name, "fvc_")
	if !ok {
		return "", false
	}
	cluster, _, ok = strings.Cut(rest, "_")
	if !ok || cluster == "" {
		return "", false
	}
	return cluster, true
}

// JetStream's advisories of consumers created and deleted on a stream
// (nats-server's JSAdvisoryConsumerCreatedPre and
// JSAdvisoryConsumerDeletedPre, then the stream and the consumer).
const (
	consumerCreatedAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.CREATED"
	consumerDeletedAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.DELETED"
)

// ConsumerAdvisories is the subject of every advisory of a consumer
// created or deleted on streamName.
func ConsumerAdvisories(streamName string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.*." + streamName + ".*"
}

// ParseConsumerAdvisory reads an advisory subject (ConsumerAdvisories):
// whether the consumer was created (else deleted) and its name; ok is
// false for any other subject.
func ParseConsumerAdvisory(subject string) (created bool, consumer string, ok bool) {
	for _, pre := range []string{consumerCreatedAdvisory, consumerDeletedAdvisory} {
		if rest, found := strings.CutPrefix(subject, pre+"."); found {
			_, consumer, ok = strings.Cut(rest, ".")
			return pre == consumerCreatedAdvisory, consumer, ok && consumer != "" && !strings.Contains(consumer, ".")
		}
	}
	return false, "", false
}
