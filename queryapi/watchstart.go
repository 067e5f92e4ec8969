package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// listAll pages through the current state with one snapshot.
func (q *queryService) listAll(ctx context.Context, o query.ListOptions, fn func(query.Object) error) (query.Version, error) {
	o.Limit, o.Client = 1000, clientOf(ctx)
	var v query.Version
	for {
		page, err := q.reader.List(ctx, o)
		if err != nil {
			return nil, err
		}
		page.Items = q.dropMalformed(ctx, "watch", page.Items)
		if v == nil {
			v = page.Version
		}
		for _, it := range page.Items {
			if err := fn(it); err != nil {
				return nil, err
			}
		}
		if page.Continue == "" {
			return v, nil
		}
		o.Continue = page.Continue
	}
}

func objectKind(b []byte) string {
	var m struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Kind
}

func objectUID(b []byte) string {
	var m struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Metadata.UID
}

// replay reads cluster c's stream for the resource from after from through
// to (stream.Replay): the compacted stream still holds the latest message of
// every object changed in that range, and the tombstones of the deleted ones.
func (q *queryService) replay(ctx context.Context, c string, gvr schema.GroupVersionResource, from, to uint64, fn func(*watchhub.Event) error) error {
	var fnErr error // fn's own error, returned as it is
	err := stream.Replay(ctx, q.js, c, stream.ResourceSubjects(c, gvr), from, to, func(seq uint64, ev *fleetviewv1.ResourceEvent) error {
		fnErr = fn(watchhub.NewEvent(c, seq, ev))
		return fnErr
	})
	if err != nil && err != fnErr {
		return fmt.Errorf("replay cluster %s: %w", c, err)
	}
	return err
}

// checkResume answers 410 for a version the streams can no longer replay.
func (q *queryService) checkResume(ctx context.Context, rv string, t query.VersionToken, gvr schema.GroupVersionResource) error {
	if q.replayer != nil {
		// The history, not the compacted stream, is replayed where it
		// keeps the resource: its window decides (watchhistory.go).
		if err := q.checkHistoryResume(ctx, rv, t, gvr); err != nil {
			return err
		}
	}
	if age := time.Since(time.Unix(t.Issued, 0)); age > q.maxResumeAge && q.streamReplayed(t, gvr) {
		return fmt.Errorf("%w: resourceVersion %q is %s old; deletes older than %s are forgotten; list again", query.ErrExpired, shortRV(rv), age.Round(time.Second), q.maxResumeAge)
	}
	for _, c := range t.Seqs.Clusters() {
		st, err := q.js.Stream(ctx, stream.StreamName(c))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w: cluster %s is no longer cached; list again", query.ErrExpired, c)
		}
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if t.Seqs[c] > info.State.LastSeq {
			return fmt.Errorf("%w: the stream of cluster %s was reset (version %d, stream ends at %d); list again", query.ErrExpired, c, t.Seqs[c], info.State.LastSeq)
		}
	}
	return nil
}

// resumeFrom opens the resourceVersion a watch resumes from; nil when it
// does not resume.
func (q *queryService) resumeFrom(ctx context.Context, rv string, gvr schema.GroupVersionResource) (*query.VersionToken, error) {
	if rv == "" || rv == "0" {
		return nil, nil
	}
	t, err := q.versions.open(ctx, rv)
	if err != nil {
		return nil, err
	}
	if err := q.checkResume(ctx, rv, t, gvr); err != nil {
		return nil, err
	}
	return &t, nil
}

// replay judges cluster c's events from after from through to, read back
// from the history when the hub keeps one (each change, its type known),
// else from its stream.
func (w *watch) replay(ctx context.Context, c string, from, to uint64) error {
	read := func(he *watchhub.Event) error { return w.process(he, true) }
	err := error(nil)
	if w.q.historyKeeps(c, w.f.gvr) {
		err = w.q.replayHistory(ctx, c, w.f.gvr, from, to, func(he *watchhub.Event) error { return w.process(he, false) })
	} else {
		err = w.q.replay(ctx, c, w.f.gvr, from, to, read)
	}
	if err != nil {
		return w.drain(err)
	}
	return nil
}

// initial sends the current state as ADDED events, then catches up with
// what the hub passed on (applied) before the watch subscribed.
func (w *watch) initial(ctx context.Context, applied query.Version, endBookmark bool) error {
	v, err := w.q.listAll(ctx, w.f.listOptions(), func(o query.Object) error {
		if w.f.tracked() {
			w.sent[o.Cluster+"/"+objectUID(o.JSON)] = struct{}{}
		}
		if w.kind == "" {
			w.kind = objectKind(o.JSON)
		}
		ev := &fleetviewv1.WatchEvent{Type: added, Cluster: o.Cluster}
		if err := w.setObject(ev, o.JSON, nil); err != nil {
			return err
		}
		return w.out.Push(ctx, ev)
	})
	if err != nil {
		return err
	}
	for c, s := range v {
		w.processed[c], w.start[c] = s, s
	}
	// A backend whose snapshot is older than what the hub passed on
	// before this watch subscribed (e.g. a lagging OpenSearch behind a
	// routing reader): catch up from the stream, or those events would
	// be lost between the list and the live feed.
	for c, to := range applied {
		if from := w.processed[c]; w.f.clusterOK(c) && from < to {
			if err := w.replay(ctx, c, from, to); err != nil {
				return err
			}
		}
	}
	if endBookmark {
		return w.bookmark(true)
	}
	return nil
}

// resume replays every cluster's stream from the client's version through
// what the hub passed on (applied) before the watch subscribed.
func (w *watch) resume(ctx context.Context, token *query.VersionToken, applied query.Version) error {
	for c, s := range token.Seqs {
		w.processed[c], w.start[c] = s, s
	}
	if w.f.tracked() {
		// The client's state is unknown to this watch; remember what
		// currently matches so objects leaving the selection are reported.
		v, err := w.q.listAll(ctx, w.f.listOptions(), func(o query.Object) error {
			w.sent[o.Cluster+"/"+objectUID(o.JSON)] = struct{}{}
			return nil
		})
		if err != nil {
			return err
		}
		for c, s := range v {
			w.horizon[c] = max(s, applied[c])
		}
	}
	clusters := map[string]bool{}
	for c := range token.Seqs {
		clusters[c] = true
	}
	for c := range applied {
		clusters[c] = true
	}
	for c := range clusters {
		from, to := w.processed[c], applied[c]
		if !w.f.clusterOK(c) || from >= to {
			continue
		}
		if err := w.replay(ctx, c, from, to); err != nil {
			return err
		}
	}
	return nil
}
