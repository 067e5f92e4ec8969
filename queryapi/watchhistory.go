package queryapi

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// HistoryReplayer is the history's per-cluster feed a resumed watch
// replays (issue #48): unlike the compacted stream, which keeps only the
// latest message of each object, it holds every change in the retention
// window, so a client resuming from a version in the window sees each
// intermediate MODIFIED, and 410 comes only once the window has passed
// the version.
type HistoryReplayer interface {
	// ChangesAfter calls fn for every recorded change of gvr (any
	// version) in cluster with from < Seq <= to, in Seq order.
	ChangesAfter(ctx context.Context, cluster string, gvr schema.GroupVersionResource, from, to uint64, fn func(query.Revision) error) error
	// HistoryWindow is what the history holds: per cluster, every change
	// after Seq[cluster]; a version at or past it replays exactly.
	HistoryWindow(ctx context.Context) (query.HistoryWindow, error)
}

// checkHistoryResume answers 410 for a version the history's window has
// passed in one of its clusters: the window lost changes after it. A
// cluster with nothing recorded lost nothing since the window's start, so
// only a version issued before that start is too old there.
func (q *queryService) checkHistoryResume(ctx context.Context, rv string, t query.VersionToken, gvr schema.GroupVersionResource) error {
	w, err := q.replayer.HistoryWindow(ctx)
	if err != nil {
		return err
	}
	issued := time.Unix(t.Issued, 0)
	for _, c := range t.Seqs.Clusters() {
		if !q.historyKeeps(c, gvr) {
			continue
		}
		if w.Start.IsZero() {
			return fmt.Errorf("%w: the history holds nothing yet; list again", query.ErrExpired)
		}
		floor, recorded := w.Seq[c]
		if recorded && t.Seqs[c] < floor || !recorded && issued.Before(w.Start.Truncate(time.Second)) {
			return fmt.Errorf("%w: resourceVersion %q (%s old) is before the history's retention window in cluster %s; list again",
				query.ErrExpired, shortRV(rv), time.Since(issued).Round(time.Second), c)
		}
	}
	return nil
}

// replayHistory is replay from the history: every change, with its type
// as recorded (an ADDED is sent as ADDED).
func (q *queryService) replayHistory(ctx context.Context, c string, gvr schema.GroupVersionResource, from, to uint64, fn func(*watchhub.Event) error) error {
	var fnErr error
	err := q.replayer.ChangesAfter(ctx, c, gvr, from, to, func(r query.Revision) error {
		he := watchhub.NewEvent(c, r.Seq, historyEvent(c, &r))
		he.IsNew = r.Type == query.ChangeAdded
		fnErr = fn(he)
		return fnErr
	})
	if err != nil && err != fnErr {
		return fmt.Errorf("replay the history of cluster %s: %w", c, err)
	}
	return err
}

// historyEvent is a recorded change as the stream event it was.
func historyEvent(c string, r *query.Revision) *fleetviewv1.ResourceEvent {
	ev := &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(r.GVR), Uid: r.UID, Namespace: r.Namespace, Name: r.Name,
		ResourceVersion: r.ResourceVersion, Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: r.Object,
		ObservedUnixNano: r.Time.UnixNano(), Namespaced: r.Namespace != "", Manager: r.Manager, Operation: r.Operation, Subresource: r.Subresource}
	if len(r.Object) > 0 {
		ev.Kind = kindOf(r.Object)
	}
	if r.Type == query.ChangeDeleted {
		ev.Type, ev.Object = fleetviewv1.EventType_EVENT_TYPE_DELETE, nil
	}
	return ev
}

// versionAge is how long resourceVersions must stay resumable: the
// history's window when a watch replays it.
func versionAge(cfg Config) time.Duration {
	if cfg.HistoryReplay != nil {
		return max(cfg.MaxResumeAge, cfg.HistoryRetention)
	}
	return cfg.MaxResumeAge
}

// historyKeeps: the history holds the resource's changes in cluster c. It
// is the default backend's (Badger's); a resource a registry routes to
// another backend (OpenSearch) has none, and a watch resumes it from the
// compacted stream within MaxResumeAge, as without history.
func (q *queryService) historyKeeps(c string, gvr schema.GroupVersionResource) bool {
	if q.replayer == nil {
		return false
	}
	if q.backends == nil {
		return true
	}
	id, _ := q.backends.BackendOf(c, gvr)
	return id == ""
}

// streamReplayed: some cluster of the version resumes the resource from
// the compacted stream.
func (q *queryService) streamReplayed(t query.VersionToken, gvr schema.GroupVersionResource) bool {
	for _, c := range t.Seqs.Clusters() {
		if !q.historyKeeps(c, gvr) {
			return true
		}
	}
	return false
}
