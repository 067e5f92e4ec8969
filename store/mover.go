package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Moving a resource between backends
//
// Each backend's materializer skips the events its routes do not give it,
// and its checkpoint moves past them. So when a registry edit routes a
// resource of a cluster to another backend, that backend has already gone
// past the resource's history, and the one it leaves still holds it. The
// router pins such a resource to the backend that holds it (reads and
// writes keep going there), and the mover below moves it:
//
//  1. The new backend's materializer is paused; the resource's subjects
//     are read from the stream (last message per subject, the stream keeps
//     no other) up to that backend's checkpoint and applied through its
//     sink with that same checkpoint, then what the backend holds is
//     checked against what was applied.
//  2. Its materializer resumes applying the resource too (the old backend
//     still does), from its checkpoint on, until it reached the stream's
//     end as of the copy.
//  3. The pin goes: reads go to the new backend, the old one skips the
//     resource's events from now on.
//  4. The old backend's materializer is paused, its copy of the resource
//     deleted, and it resumes. OpenSearch keeps its copy instead (see
//     moveInto), unserved until the resource comes back.
//
// Across restarts the same holds: the route table, pins included, is
// saved next to Badger, and a route that changed while serve was stopped,
// or a move cut short, is a pin and a move at the next start (see
// routestate.go).
//
// A query never reads a backend that lacks the resource's objects, and
// never two backends for the same resource (a search, which spans every
// backend, keeps each hit only from the backend that serves it).

// move is one pinned resource of one cluster and where it goes.
type move struct {
	pairKey
	from, to string
}

// reroute moves every pinned resource whose new backend is connected; the
// others stay pinned (and served where they are) until it is.
func (s *Set) reroute(ctx context.Context) error {
	t := s.router.table.Load()
	byTarget := map[string][]move{}
	for p, from := range t.pins {
		to := t.routed(p.gvr, p.kind, p.cluster)
		if s.member(to) == nil {
			continue
		}
		byTarget[to] = append(byTarget[to], move{pairKey: p, from: from, to: to})
	}
	targets := make([]string, 0, len(byTarget))
	for to := range byTarget {
		targets = append(targets, to)
	}
	sort.Strings(targets)
	var errs []error
	for _, to := range targets {
		ms := byTarget[to]
		sort.Slice(ms, func(i, j int) bool { return ms[i].less(ms[j].pairKey) })
		if err := s.moveInto(ctx, s.member(to), ms); err != nil {
			errs = append(errs, fmt.Errorf("into backend %q: %w", to, err))
		}
	}
	return errors.Join(errs...)
}

func (p pairKey) less(o pairKey) bool {
	if p.cluster != o.cluster {
		return p.cluster < o.cluster
	}
	return p.gvr.String() < o.gvr.String()
}

// moveInto moves resources into backend g (steps 1-4 above).
func (s *Set) moveInto(ctx context.Context, g *member, ms []move) error {
	start := time.Now()
	s.log.Info("moving resources between backends", "resources", len(ms), "to", g.id)
	ends, copied, err := s.copyAll(ctx, g, ms)
	if err != nil {
		return err
	}
	if err := s.catchUp(ctx, g, ms, ends); err != nil {
		return err
	}
	if err := s.switchReads(ms); err != nil {
		return err
	}
	// Once the old backends are paused (in dropOld), none of their batches
	// is left to report: the handovers go.
	defer s.router.update(func(t *routeTable) *routeTable {
		moving := maps.Clone(t.moving)
		for _, m := range ms {
			delete(moving, m.pairKey)
		}
		return t.with(t.pins, moving)
	})
	dropped, err := s.dropOld(ctx, ms)
	for _, m := range ms {
		s.log.Info("resource moved between backends", "cluster", m.cluster, "resource", m.gvr.String(), "from", m.from, "to", m.to)
	}
	s.log.Info("backends rerouted", "resources", len(ms), "to", g.id, "copied", copied, "dropped", dropped, "took", time.Since(start).Round(time.Millisecond))
	return err
}

// copyAll is step 1: with g's materializer paused, each cluster's
// resources are copied into g up to its checkpoint. It returns where each
// cluster's stream ended then, and how many objects g holds. g stays
// paused unless the copy fails: started before catchUp names the
// resources as moving into it, it would skip their events for good.
func (s *Set) copyAll(ctx context.Context, g *member, ms []move) (ends map[string]uint64, copied int, err error) {
	byCluster := map[string][]move{}
	for _, m := range ms {
		byCluster[m.cluster] = append(byCluster[m.cluster], m)
	}
	g.pause()
	defer func() {
		if err != nil {
			g.start(ctx, s.fail)
		}
	}()
	ends = map[string]uint64{}
	for c, cms := range byCluster {
		ckpt, err := g.b.Checkpoint(ctx, c)
		if err != nil {
			return nil, 0, err
		}
		// A backend that never read this stream gets the resource from
		// its materializer, which starts at the stream's beginning.
		if ckpt > 0 {
			n, err := s.copyInto(ctx, g, c, cms, ckpt)
			if err != nil {
				return nil, 0, fmt.Errorf("cluster %s: %w", c, err)
			}
			copied += n
		}
		if ends[c], err = streamEnd(ctx, s.cfg.JetStream, c); err != nil {
			return nil, 0, err
		}
	}
	return ends, copied, nil
}

// catchUp is step 2: g (paused by copyAll) applies the resources too (both backends do, each
// reporting its side of the handover), until it caught up with the
// stream's ends as of the copy.
func (s *Set) catchUp(ctx context.Context, g *member, ms []move, ends map[string]uint64) error {
	s.router.update(func(t *routeTable) *routeTable {
		moving := maps.Clone(t.moving)
		if moving == nil {
			moving = map[pairKey]handover{}
		}
		for _, m := range ms {
			moving[m.pairKey] = handover{to: m.to, seq: ends[m.cluster]}
		}
		return t.with(t.pins, moving)
	})
	g.start(ctx, s.fail)
	return waitCaughtUp(ctx, g.mat, ends)
}

// switchReads is step 3: reads go to the new backends, and the old ones
// skip the resources from now on. The table is saved first: the next run
// must find the resources where reads go, and a crash after the old copies
// went (4) must not leave a saved table naming the backend that dropped
// them. Unsaved, the pins stay and the move is tried again.
func (s *Set) switchReads(ms []move) error {
	t := s.router.table.Load()
	pins := maps.Clone(t.pins)
	for _, m := range ms {
		delete(pins, m.pairKey)
	}
	switched := t.with(pins, t.moving)
	if err := s.router.save(switched); err != nil {
		return err
	}
	s.router.table.Store(switched)
	s.router.switches.Add(1)
	return nil
}

// dropOld is step 4: the old copies go, and it returns how many objects
// were deleted.
func (s *Set) dropOld(ctx context.Context, ms []move) (int, error) {
	byFrom := map[string][]move{}
	for _, m := range ms {
		byFrom[m.from] = append(byFrom[m.from], m)
	}
	dropped := 0
	var errs []error
	for from, fms := range byFrom {
		l := s.member(from)
		if l == nil {
			continue // never connected: it holds nothing
		}
		if l.versioned {
			// OpenSearch keeps a deleted document's version for a day
			// (index.gc_deletes), so that no replay resurrects it: deleted
			// now, the resource could not come back to this backend for
			// that long (its copy carries the objects' older versions).
			// Its documents stay, never served (reads and searches go by
			// route); a move back updates or deletes each of them.
			s.log.Info("old copy kept in OpenSearch, not served", "backend", from, "resources", len(fms))
			continue
		}
		n, err := s.dropFrom(ctx, l, fms)
		dropped += n
		if err != nil {
			errs = append(errs, fmt.Errorf("dropping the old copy from backend %q: %w", from, err))
		}
	}
	return dropped, errors.Join(errs...)
}

// streamEnd is the last sequence of a cluster's stream (0 without one).
func streamEnd(ctx context.Context, js jetstream.JetStream, cluster string) (uint64, error) {
	st, err := js.Stream(ctx, stream.StreamName(cluster))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.LastSeq, nil
}

// waitCaughtUp waits until mat applied every cluster stream up to ends.
func waitCaughtUp(ctx context.Context, mat *materializer.Materializer, ends map[string]uint64) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		applied := mat.Applied()
		behind := false
		for c, end := range ends {
			if applied[c] < end {
				behind = true
			}
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// copyBatch is how many events one sink call of the mover carries.
const copyBatch = 500

// objRef names an object of a resource by uid.
type objRef struct {
	gvr schema.GroupVersionResource
	uid string
}

// stored is what the mover needs of a stored or streamed object.
type stored struct {
	Metadata struct {
		UID             string `json:"uid"`
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// copyInto applies the resources' stream state up to ckpt to g's sink
// (paused), with ckpt as the checkpoint, and checks g holds exactly that
// state. It returns how many objects g holds.
func (s *Set) copyInto(ctx context.Context, g *member, cluster string, ms []move, ckpt uint64) (int, error) {
	kinds := map[schema.GroupVersionResource]string{}
	var subjects []string
	for _, m := range ms {
		kinds[m.gvr] = m.kind
		subjects = append(subjects, stream.ResourceSubjects(cluster, m.gvr)...)
	}
	want := map[objRef]string{} // resourceVersion of every object the state holds
	_, err := s.cfg.JetStream.Stream(ctx, stream.StreamName(cluster))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, err
	}
	if err == nil {
		if err := s.replay(ctx, g, cluster, subjects, ckpt, want); err != nil {
			return 0, err
		}
	}
	// Check: objects the stream does not hold (left over from an earlier
	// stay) go; an object missing or older than the stream's means the
	// backend refused the write (OpenSearch keeps a deleted document's
	// version for a while: a resource moved back soon after it left is
	// refused until then). The move is retried on the next round.
	have := map[objRef]stored{}
	for gvr := range kinds {
		if err := listRefs(ctx, g.b, gvr, cluster, have); err != nil {
			return 0, err
		}
	}
	var extra []stored
	var extraGVR []schema.GroupVersionResource
	missing := 0
	for ref, s := range have {
		if _, ok := want[ref]; !ok {
			extra = append(extra, s)
			extraGVR = append(extraGVR, ref.gvr)
		}
	}
	for ref, rv := range want {
		if s, ok := have[ref]; !ok || s.Metadata.ResourceVersion != rv {
			missing++
		}
	}
	if len(extra) > 0 {
		evs := make([]feed.Event, len(extra))
		for i, s := range extra {
			evs[i] = deleteEvent(cluster, extraGVR[i], kinds[extraGVR[i]], s, dropSeq(g, ckpt))
		}
		if err := applyChunks(ctx, g.b, cluster, evs, ckpt); err != nil {
			return 0, err
		}
	}
	if missing > 0 {
		return 0, fmt.Errorf("%w: %d of %d objects not stored as in the stream", ErrMoveIncomplete, missing, len(want))
	}
	return len(want), nil
}

// replay reads the last message of each subject up to ckpt, in stream
// order (stream.Replay), and applies them to g's sink; want ends up holding
// the objects of the state, with their resourceVersions.
func (s *Set) replay(ctx context.Context, g *member, cluster string, subjects []string, ckpt uint64, want map[objRef]string) error {
	var evs []feed.Event
	err := stream.Replay(ctx, s.cfg.JetStream, cluster, subjects, 0, ckpt, func(seq uint64, ev *fleetviewv1.ResourceEvent) error {
		gvr := stream.GVR(ev.GetGvr())
		switch ev.GetType() {
		case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			var s stored
			if json.Unmarshal(ev.GetObject(), &s) != nil {
				return nil // poison: the materializers dead-lettered it
			}
			want[objRef{gvr, ev.GetUid()}] = s.Metadata.ResourceVersion
		case fleetviewv1.EventType_EVENT_TYPE_DELETE:
			delete(want, objRef{gvr, ev.GetUid()})
		case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
			for ref := range want {
				if ref.gvr == gvr {
					delete(want, ref)
				}
			}
		}
		evs = append(evs, feed.Event{Seq: seq, Event: ev})
		if len(evs) < copyBatch {
			return nil
		}
		err := applyChunks(ctx, g.b, cluster, evs, ckpt)
		evs = evs[:0]
		return err
	})
	if err != nil {
		return err
	}
	return applyChunks(ctx, g.b, cluster, evs, ckpt)
}

// applyChunks applies events in sink calls of copyBatch, each keeping the
// checkpoint at ckpt.
func applyChunks(ctx context.Context, sink materializer.Sink, cluster string, evs []feed.Event, ckpt uint64) error {
	for len(evs) > 0 {
		n := min(len(evs), copyBatch)
		if err := sink.Apply(ctx, cluster, evs[:n], ckpt); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// listRefs adds every object of a resource in a cluster that r holds.
func listRefs(ctx context.Context, r backendReader, gvr schema.GroupVersionResource, cluster string, out map[objRef]stored) error {
	o := query.ListOptions{GVR: gvr, Clusters: []string{cluster}, Limit: copyBatch}
	for {
		p, err := r.List(ctx, o)
		if err != nil {
			return err
		}
		for _, it := range p.Items {
			var s stored
			if err := json.Unmarshal(it.JSON, &s); err != nil {
				return fmt.Errorf("stored %s in %s: %w", gvr, cluster, err)
			}
			out[objRef{gvr, s.Metadata.UID}] = s
		}
		if p.Continue == "" {
			return nil
		}
		o.Continue = p.Continue
	}
}

// dropSeq is the sequence of the mover's deletes in a backend whose
// checkpoint is ckpt: a versioned backend only deletes a document for a
// version above the one it holds (at most ckpt); the others take ckpt,
// which no partial commit could move the checkpoint past.
func dropSeq(m *member, ckpt uint64) uint64 {
	if m.versioned {
		return ckpt + 1
	}
	return ckpt
}

func deleteEvent(cluster string, gvr schema.GroupVersionResource, kind string, s stored, seq uint64) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{
		Cluster: cluster, Gvr: stream.ProtoGVR(gvr), Kind: kind, Type: fleetviewv1.EventType_EVENT_TYPE_DELETE,
		Uid: s.Metadata.UID, Namespace: s.Metadata.Namespace, Name: s.Metadata.Name, Namespaced: s.Metadata.Namespace != "",
	}}
}

// dropFrom deletes the resources' objects from backend l, its
// materializer paused meanwhile, and returns how many it deleted.
func (s *Set) dropFrom(ctx context.Context, l *member, ms []move) (int, error) {
	l.pause()
	defer l.start(ctx, s.fail)
	n := 0
	for _, m := range ms {
		have := map[objRef]stored{}
		if err := listRefs(ctx, l.b, m.gvr, m.cluster, have); err != nil {
			return n, err
		}
		if len(have) == 0 {
			continue
		}
		ckpt, err := l.b.Checkpoint(ctx, m.cluster)
		if err != nil {
			return n, err
		}
		evs := make([]feed.Event, 0, len(have))
		for _, s := range have {
			evs = append(evs, deleteEvent(m.cluster, m.gvr, m.kind, s, dropSeq(l, ckpt)))
		}
		if err := applyChunks(ctx, l.b, m.cluster, evs, ckpt); err != nil {
			return n, err
		}
		n += len(evs)
	}
	return n, nil
}
