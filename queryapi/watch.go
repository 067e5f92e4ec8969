package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Watch event types (Kubernetes spelling).
const (
	added    = "ADDED"
	modified = "MODIFIED"
	deleted  = "DELETED"
	bookmark = "BOOKMARK"
)

// watch is the state of one Watch call.
type watch struct {
	q *queryService
	// structured: send objects as Struct (WatchRequest.structured), not
	// as their stored JSON.
	structured bool
	f          *selection
	kind       string
	out        *queue[*fleetviewv1.WatchEvent]
	versions   *versionBook
	// processed is, per cluster, the last stream sequence this watch has
	// judged: events at or below it are never sent again.
	processed query.Version
	// start are the clusters the client's state covers; objects of any
	// other cluster are new to it (ADDED).
	start query.Version
	// horizon: events at or below it may concern objects the client holds
	// without this watch knowing (a resume), so an object leaving the
	// selection is reported even if this watch never sent it.
	horizon query.Version
	sent    map[string]struct{}
	// sendErr receives the sender's outcome once it stops.
	sendErr chan error
	// metrics counts the events sent.
	metrics watchMetrics
}

var errOutFull = fmt.Errorf("%w: the client did not read its watch events fast enough; resume from the last resourceVersion or list again", query.ErrTooSlow)

// emit queues one event about he. raw is the object to send when it is not
// he's own (a tombstone's stub); he's own object is sent as stored, and
// its Struct form, for a structured watch, is built once for every watch.
func (w *watch) emit(typ string, he *hubEvent, raw []byte) error {
	rv, ok := he.token(w.versions)
	if !ok {
		var err error
		if rv, err = w.versions.seal(context.Background(), w.processed, time.Now()); err != nil {
			return err
		}
	}
	ev := &fleetviewv1.WatchEvent{Type: typ, Cluster: he.cluster, ResourceVersion: rv}
	shared := he
	if raw != nil {
		shared = nil
	} else {
		raw = he.ev.GetObject()
	}
	if err := w.setObject(ev, raw, shared); err != nil {
		return nil // the materializer dead-letters what it cannot decode
	}
	return w.queue(ev)
}

// setObject puts the object on ev in the form the client asked for.
func (w *watch) setObject(ev *fleetviewv1.WatchEvent, raw []byte, shared *hubEvent) error {
	if !w.structured {
		ev.RawObject = raw
		return nil
	}
	var err error
	if shared != nil {
		ev.Object, err = shared.structured()
	} else {
		ev.Object, err = toStruct(raw)
	}
	return err
}

// stub is an object known by its metadata only: a tombstone or a
// bookmark.
type stub struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind,omitempty"`
	Metadata   stubMeta `json:"metadata"`
}

type stubMeta struct {
	Name            string            `json:"name,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

func (s stub) json() []byte {
	b, _ := json.Marshal(s) // strings and a string map: cannot fail
	return b
}

// tombstone is the object of a DELETED event when only the stream's
// tombstone is known: its metadata and the cache-source annotations.
func (w *watch) tombstone(he *hubEvent) []byte {
	ev := he.ev
	return stub{APIVersion: he.gvr.GroupVersion().String(), Kind: ev.GetKind(), Metadata: stubMeta{
		Name: ev.GetName(), Namespace: ev.GetNamespace(), UID: ev.GetUid(), ResourceVersion: ev.GetResourceVersion(),
		Annotations: map[string]string{"fleetview.io/cluster": he.cluster, "resource.karmada.io/cached-from-cluster": he.cluster},
	}}.json()
}

// queue hands ev to the sender; a full outbox cuts the watch.
func (w *watch) queue(ev *fleetviewv1.WatchEvent) error {
	if !w.out.tryPush(ev) {
		return errOutFull
	}
	return nil
}

// process judges one event; replayed marks events read back from the
// stream (whose ADDED/MODIFIED distinction is unknown).
func (w *watch) process(he *hubEvent, replayed bool) error {
	c := he.cluster
	if he.seq <= w.processed[c] {
		return nil // already judged: the live feed overlapping the replay
	}
	w.processed[c] = he.seq
	if !w.f.clusterOK(c) {
		return nil
	}
	ev := he.ev
	if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED && !w.f.visible.Allows(w.f.gvr.GroupResource(), c, ev.GetNamespace()) {
		return nil // never sent, so never to be deleted either
	}
	if w.kind == "" {
		w.kind = ev.GetKind()
	}
	key := c + "/" + ev.GetUid()
	_, newCluster := w.start[c]
	newCluster = !newCluster
	mayHold := he.seq <= w.horizon[c]
	switch ev.GetType() {
	case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return fmt.Errorf("%w: %s is no longer cached from cluster %s; list again", query.ErrExpired, w.f.gvr.GroupResource(), c)
	case fleetviewv1.EventType_EVENT_TYPE_DELETE:
		if !w.f.metaOK(ev.GetNamespace(), ev.GetName()) {
			return nil
		}
		if w.f.tracked() {
			if _, ok := w.sent[key]; ok {
				delete(w.sent, key)
			} else if !mayHold {
				return nil
			}
		}
		return w.emit(deleted, he, w.tombstone(he))
	case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
		lbls, err := he.decode()
		if err != nil {
			// The materializer dead-letters what it cannot decode, so only
			// a replay from the stream meets one; the watch goes on.
			w.q.reportMalformed(context.Background(), "watch", c, err)
			return nil
		}
		match := w.f.metaOK(ev.GetNamespace(), ev.GetName()) && w.f.labels.Matches(lbls)
		if match && w.f.fields.NeedsObject() {
			match, _ = w.f.fields.Matches(ev.GetNamespace(), ev.GetName(), ev.GetObject())
		}
		if !match {
			if !w.f.tracked() {
				return nil
			}
			if _, ok := w.sent[key]; ok {
				delete(w.sent, key)
				return w.emit(deleted, he, nil)
			}
			if mayHold && w.f.metaOK(ev.GetNamespace(), ev.GetName()) {
				return w.emit(deleted, he, nil)
			}
			return nil
		}
		typ := modified
		if newCluster || (he.isNew && !replayed) {
			typ = added
		}
		if w.f.tracked() {
			if _, ok := w.sent[key]; !ok {
				if !mayHold {
					typ = added
				}
				w.sent[key] = struct{}{}
			}
		}
		return w.emit(typ, he, nil)
	}
	return nil
}

func (w *watch) bookmark(initialEnd bool) error {
	rv, err := w.versions.seal(context.Background(), w.processed, time.Now())
	if err != nil {
		return err
	}
	md := stubMeta{ResourceVersion: rv}
	if initialEnd {
		md.Annotations = map[string]string{"k8s.io/initial-events-end": "true"}
	}
	ev := &fleetviewv1.WatchEvent{Type: bookmark, ResourceVersion: rv, InitialEventsEnd: initialEnd}
	if err := w.setObject(ev, stub{APIVersion: w.f.gvr.GroupVersion().String(), Kind: w.kind, Metadata: md}.json(), nil); err != nil {
		return err
	}
	return w.queue(ev)
}

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
// to: the compacted stream still holds the latest message of every object
// changed in that range, and the tombstones of the deleted ones.
func (q *queryService) replay(ctx context.Context, c string, gvr schema.GroupVersionResource, from, to uint64, fn func(*hubEvent) error) error {
	cons, err := q.js.OrderedConsumer(ctx, stream.StreamName(c), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.ResourceFilter(c, gvr), stream.ControlSubject(c, gvr)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1,
	})
	if err != nil {
		return fmt.Errorf("replay cluster %s: %w", c, err)
	}
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return fmt.Errorf("replay cluster %s: %w", c, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			if seq > to {
				return nil
			}
			if ev, err := stream.Decode(msg.Subject(), msg.Data()); err == nil {
				if err := fn(newHubEvent(c, seq, ev)); err != nil {
					return err
				}
			}
			if seq == to || md.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("replay cluster %s: %w", c, err)
		}
		if n == 0 {
			return nil
		}
	}
}

// checkResume answers 410 for a version the streams can no longer replay.
func (q *queryService) checkResume(ctx context.Context, rv string, t query.VersionToken) error {
	if age := time.Since(time.Unix(t.Issued, 0)); age > q.maxResumeAge {
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

// Watch implements the gRPC server stream (and, through watchHTTP, REST).
func (q *queryService) Watch(req *fleetviewv1.WatchRequest, ss grpc.ServerStreamingServer[fleetviewv1.WatchEvent]) error {
	return toStatus(q.watch(ss.Context(), req, ss.Send))
}

func (q *queryService) watch(ctx context.Context, req *fleetviewv1.WatchRequest, send func(*fleetviewv1.WatchEvent) error) (err error) {
	f, err := q.selection(ctx, req.GetGroup(), req.GetVersion(), req.GetResource(), req.GetNamespace(), req.GetLabelSelector(), req.GetFieldSelector(), req.GetClusters(), req.GetClusterSelector())
	if err != nil {
		return err
	}
	// f carries the caller's visibility: hidden objects are neither listed
	// nor queued, so they never fill this watch's buffer (a 429 caused by
	// what the caller cannot see would tell of it).
	resume, err := q.resumeFrom(ctx, req.GetResourceVersion())
	if err != nil {
		return err
	}
	if q.hub == nil {
		return status501("watch needs the materializer's hub")
	}
	// Counted before anything is held for the watch: a refused one costs
	// nothing but this answer.
	release, err := q.watches.acquire(clientOf(ctx))
	if err != nil {
		return err
	}
	defer release()
	wm := q.metrics.watchOpened(ctx)
	// The client's context, not the watch's own (cancelled first on return).
	defer func(ctx context.Context) { wm.ended(ctx, err) }(ctx)
	sub, applied := q.hub.subscribe(f.gvr, f.labels)
	defer q.hub.unsubscribe(sub)
	// The backend may have committed batches the hub has not been told
	// about yet (or, after a restart, the hub has seen nothing): replay
	// through the committed checkpoint; the live feed's overlap is
	// dropped by sequence.
	committed, err := q.reader.Versions(ctx)
	if err != nil {
		return err
	}
	for c, s := range committed {
		applied[c] = max(applied[c], s)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &watch{q: q, f: f, structured: req.GetStructured(), out: newQueue[*fleetviewv1.WatchEvent](q.watchBuffer), versions: q.versions,
		processed: query.Version{}, start: query.Version{}, horizon: query.Version{}, sent: map[string]struct{}{},
		sendErr: make(chan error, 1), metrics: wm}
	go w.sendAll(ctx, cancel, send)
	// Kubernetes: a watch without a resourceVersion (or "0") starts with
	// the current state as synthetic ADDED events.
	if req.GetSendInitialEvents() || resume == nil {
		err = w.initial(ctx, applied, req.GetSendInitialEvents())
	} else {
		err = w.resume(ctx, resume, applied)
	}
	if err != nil {
		return err
	}
	watchStarted(ctx)
	return w.follow(ctx, sub, req.GetAllowBookmarks())
}

// resumeFrom opens the resourceVersion a watch resumes from; nil when it
// does not resume.
func (q *queryService) resumeFrom(ctx context.Context, rv string) (*query.VersionToken, error) {
	if rv == "" || rv == "0" {
		return nil, nil
	}
	t, err := q.versions.open(ctx, rv)
	if err != nil {
		return nil, err
	}
	if err := q.checkResume(ctx, rv, t); err != nil {
		return nil, err
	}
	return &t, nil
}

// sendAll hands the queued events to the client until ctx ends or sending
// fails; then it reports on sendErr (nil when ctx ended) and, on failure,
// ends the watch.
func (w *watch) sendAll(ctx context.Context, cancel context.CancelFunc, send func(*fleetviewv1.WatchEvent) error) {
	for {
		select {
		case <-ctx.Done():
			w.sendErr <- nil
			return
		case <-w.out.ready:
		}
		for ev, ok := w.out.pop(); ok; ev, ok = w.out.pop() {
			if err := send(ev); err != nil {
				w.sendErr <- err
				cancel()
				return
			}
			w.metrics.eventSent()
		}
	}
}

// drain lets the sender flush what is queued before the watch ends with an
// error the client must see after the events.
func (w *watch) drain(err error) error {
	deadline := time.After(5 * time.Second)
	for w.out.len() > 0 {
		select {
		case <-deadline:
			return err
		case serr := <-w.sendErr:
			if serr != nil {
				return serr
			}
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	return err
}

// replay judges cluster c's events from after from through to, read back
// from its stream.
func (w *watch) replay(ctx context.Context, c string, from, to uint64) error {
	if err := w.q.replay(ctx, c, w.f.gvr, from, to, func(he *hubEvent) error { return w.process(he, true) }); err != nil {
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
		return w.out.push(ctx, ev)
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

// follow judges the live feed until the watch ends.
func (w *watch) follow(ctx context.Context, sub *subscription, bookmarks bool) error {
	var tick <-chan time.Time
	if bookmarks {
		t := time.NewTicker(w.q.bookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			select {
			case err := <-w.sendErr:
				if err != nil {
					return err
				}
			default:
			}
			return ctx.Err()
		case err := <-w.sendErr:
			return err
		case <-sub.overflow:
			return errOutFull
		case <-w.q.stopping:
			return status.Error(codes.Unavailable, "server shutting down; resume the watch from the last resourceVersion")
		case <-tick:
			if err := w.bookmark(false); err != nil {
				return err
			}
		case <-sub.q.ready:
			for b, ok := sub.q.pop(); ok; b, ok = sub.q.pop() {
				for _, he := range b.events {
					if err := w.process(he, false); err != nil {
						return w.drain(err)
					}
				}
			}
		}
	}
}
