package queryapi

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/watchhub"
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
	out        *watchhub.Queue[*fleetviewv1.WatchEvent]
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

// queue hands ev to the sender; a full outbox cuts the watch.
func (w *watch) queue(ev *fleetviewv1.WatchEvent) error {
	if !w.out.TryPush(ev) {
		return errOutFull
	}
	return nil
}

// Watch implements the gRPC server stream (and, through watchHTTP, REST).
func (q *queryService) Watch(req *fleetviewv1.WatchRequest, ss grpc.ServerStreamingServer[fleetviewv1.WatchEvent]) error {
	err := q.watch(ss.Context(), req, ss.Send)
	if err != nil && ss.Context().Err() != nil {
		// Ended by its context: with the reason it was ended for (the
		// Guard ends a watch whose access was revoked with Forbidden),
		// context.Canceled when the client left.
		err = context.Cause(ss.Context())
	}
	return apierr.ToStatus(err)
}

func (q *queryService) watch(ctx context.Context, req *fleetviewv1.WatchRequest, send func(*fleetviewv1.WatchEvent) error) (err error) {
	f, err := q.selection(ctx, req.GetGroup(), req.GetVersion(), req.GetResource(), req.GetNamespace(), req.GetLabelSelector(), req.GetFieldSelector(), req.GetClusters(), req.GetClusterSelector())
	if err != nil {
		return err
	}
	if err := noRelations(f.fields, "a watch"); err != nil {
		return err
	}
	// f carries the caller's visibility: hidden objects are neither listed
	// nor queued, so they never fill this watch's buffer (a 429 caused by
	// what the caller cannot see would tell of it).
	resume, err := q.resumeFrom(ctx, req.GetResourceVersion(), f.gvr)
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
	sub, applied := q.hub.Subscribe(f.gvr, f.labels, f.clusters)
	defer q.hub.Unsubscribe(sub)
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
	w := &watch{q: q, f: f, structured: req.GetStructured(), out: watchhub.NewQueue[*fleetviewv1.WatchEvent](q.watchBuffer), versions: q.versions,
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

// sendAll hands the queued events to the client until ctx ends or sending
// fails; then it reports on sendErr (nil when ctx ended) and, on failure,
// ends the watch.
func (w *watch) sendAll(ctx context.Context, cancel context.CancelFunc, send func(*fleetviewv1.WatchEvent) error) {
	for {
		select {
		case <-ctx.Done():
			w.sendErr <- nil
			return
		case <-w.out.Ready():
		}
		for ev, ok := w.out.Pop(); ok; ev, ok = w.out.Pop() {
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
	for w.out.Len() > 0 {
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

// follow judges the live feed until the watch ends.
func (w *watch) follow(ctx context.Context, sub *watchhub.Subscription, bookmarks bool) error {
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
		case <-sub.Overflow():
			return errOutFull
		case <-w.q.stopping:
			return status.Error(codes.Unavailable, "server shutting down; resume the watch from the last resourceVersion")
		case <-tick:
			if err := w.bookmark(false); err != nil {
				return err
			}
		case <-sub.Batches().Ready():
			for b, ok := sub.Batches().Pop(); ok; b, ok = sub.Batches().Pop() {
				for _, he := range b.Events {
					if err := w.process(he, false); err != nil {
						return w.drain(err)
					}
				}
			}
		}
	}
}
