package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetview/fleetview/internal/natsnames"
)

const (
	// StreamPrefix prefixes the per-cluster stream names.
	StreamPrefix = "FV_"
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

// DefaultMaxBytes is the default byte quota of one cluster's stream: room
// for a large cluster's current state (150,000 objects of a few KiB) many
// times over. JetStream reserves a stream's MaxBytes against its store
// when the stream is created, so the quota must stay far below the disk.
const DefaultMaxBytes = 1 << 30

// DefaultHistoryDepth is the most messages a cluster's stream keeps per
// object while the hub keeps history (--history-stream-depth): an object
// may change this many times before the hub's materializer reads the
// first change, and the history still records each one. Eight covers the
// changes of one object while the hub restarts or catches up (a Pod's
// status moves a handful of times as it starts; unpaced back-to-back edits
// of one object were one or two messages ahead of the hub), and bounds the
// stream at eight times an object's size only for the objects that change
// that often, which keeps a 15,000-Pod cluster's worst case (8 x 45 MB)
// inside DefaultMaxBytes.
const DefaultHistoryDepth = 8

// MaxHistoryDepth bounds --history-stream-depth: JetStream keeps a
// per-subject index of every message, and the stream's bytes grow with the
// depth times the objects that change that often.
const MaxHistoryDepth = 1024

// StreamConfig is the configuration of a cluster's stream: a compacted log
// (one message per subject; EnsureStream and EnsureDepth keep more while
// the hub keeps history) whose tombstones expire. maxBytes > 0 is the
// stream's byte quota (0: none).
//
// Discard is New: at the quota JetStream refuses the publish that would
// grow the stream ("maximum bytes exceeded", see QuotaError), where Old
// would silently drop the oldest messages, i.e. the current state of the
// objects that changed least recently. Replacing an object's message with
// a smaller one (a tombstone, a shrinking object) still passes at the
// quota when the object already has its MaxMsgsPerSubject messages, and
// the per-subject limit still replaces each object's oldest message
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
// the quota applies as asked. depth is the messages kept per object
// (StreamConfig); 0 keeps an existing stream's depth, which is the hub's
// to set (EnsureDepth: a collector does not know whether the hub keeps
// history), and creates a missing stream with 1. st is the stream, its
// cached info as the update left it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cluster string, replicas int, maxBytes int64, depth int) (st jetstream.Stream, kept int64, err error) {
	cfg := StreamConfig(cluster, replicas, maxBytes)
	cfg.MaxMsgsPerSubject = int64(max(depth, 1))
	if maxBytes > 0 || depth == 0 {
		old, err := js.Stream(ctx, cfg.Name)
		switch {
		case err == nil:
			info := old.CachedInfo()
			if held := int64(info.State.Bytes); maxBytes > 0 && held > maxBytes {
				cfg.MaxBytes, kept = held, held
			}
			if depth == 0 && info.Config.MaxMsgsPerSubject > 1 {
				cfg.MaxMsgsPerSubject = info.Config.MaxMsgsPerSubject
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, 0, err
		}
	}
	// CreateOrUpdateStream also moves an existing stream to replicas:
	// JetStream adds or removes peers and catches new ones up from the
	// leader, so a hub moved from R1 to R3 keeps what its streams hold.
	st, err = js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, 0, natsnames.ReplicasError("stream "+cfg.Name, cfg.Replicas, err)
	}
	return st, kept, nil
}

// EnsureDepth sets the messages cluster's existing stream keeps per object
// to depth (at least 1), leaving the rest of its configuration as it is:
// the hub's materializer calls it for every stream it consumes, since a
// collector may have created the stream (with 1). Raising the depth keeps
// every message; lowering it drops each object's older messages, never
// its last. changed says whether the stream was updated.
func EnsureDepth(ctx context.Context, js jetstream.JetStream, cluster string, depth int) (changed bool, err error) {
	st, err := js.Stream(ctx, StreamName(cluster))
	if err != nil {
		return false, err
	}
	cfg := st.CachedInfo().Config
	want := int64(max(depth, 1))
	if cfg.MaxMsgsPerSubject == want {
		return false, nil
	}
	cfg.MaxMsgsPerSubject = want
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return false, fmt.Errorf("stream %s: messages per object %d: %w", cfg.Name, want, err)
	}
	return true, nil
}
