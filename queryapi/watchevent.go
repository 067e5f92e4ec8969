package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// emit queues one event about he. raw is the object to send when it is not
// he's own (a tombstone's stub); he's own object is sent as stored, and
// its Struct form, for a structured watch, is built once for every watch.
func (w *watch) emit(typ string, he *watchhub.Event, raw []byte) error {
	rv, ok := he.Token(w.versions)
	if !ok {
		var err error
		if rv, err = w.versions.Seal(context.Background(), w.position(), time.Now()); err != nil {
			return err
		}
	}
	ev := &fleetviewv1.WatchEvent{Type: typ, Cluster: he.Cluster, ResourceVersion: rv}
	shared := he
	if raw != nil {
		shared = nil
	} else {
		raw = he.Event.GetObject()
		if !w.structured {
			ev.RawCells = he.Event.GetCells()
		}
	}
	if err := w.setObject(ev, raw, shared); err != nil {
		return nil // the materializer dead-letters what it cannot decode
	}
	return w.queue(ev)
}

// setObject puts the object on ev in the form the client asked for.
func (w *watch) setObject(ev *fleetviewv1.WatchEvent, raw []byte, shared *watchhub.Event) error {
	if !w.structured {
		ev.RawObject = raw
		return nil
	}
	var err error
	if shared != nil {
		ev.Object, err = shared.Structured()
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
func (w *watch) tombstone(he *watchhub.Event) []byte {
	ev := he.Event
	return stub{APIVersion: he.GVR.GroupVersion().String(), Kind: ev.GetKind(), Metadata: stubMeta{
		Name: ev.GetName(), Namespace: ev.GetNamespace(), UID: ev.GetUid(), ResourceVersion: ev.GetResourceVersion(),
		Annotations: map[string]string{"fleetview.io/cluster": he.Cluster, "resource.karmada.io/cached-from-cluster": he.Cluster},
	}}.json()
}

// process judges one event; replayed marks events read back from the
// stream (whose ADDED/MODIFIED distinction is unknown).
func (w *watch) process(he *watchhub.Event, replayed bool) error {
	c := he.Cluster
	if he.Seq <= w.processed[c] {
		return nil // already judged: the live feed overlapping the replay
	}
	w.processed[c] = he.Seq
	if !w.f.clusterOK(c) {
		return nil
	}
	ev := he.Event
	if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED && !w.f.visible.Allows(w.f.gvr.GroupResource(), c, ev.GetNamespace()) {
		return nil // never sent, so never to be deleted either
	}
	if w.kind == "" {
		w.kind = ev.GetKind()
	}
	key := c + "/" + ev.GetUid()
	_, newCluster := w.start[c]
	newCluster = !newCluster
	mayHold := he.Seq <= w.horizon[c]
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
		lbls, err := he.Labels()
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
		if newCluster || (he.IsNew && !replayed) {
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
	rv, err := w.versions.Seal(context.Background(), w.position(), time.Now())
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

// position is what the watch has judged, per cluster, as its versions
// say it. A watch of some clusters is fed their batches only (Hub), so
// for the others it takes the hub's feed as judged, as it did when every
// batch reached it: nothing of theirs is ever sent, and a version that
// kept their sequences from the watch's start would drift from the
// current epoch until every bookmark stored a new one.
func (w *watch) position() query.Version {
	if w.f.clusters == nil || w.q.hub == nil {
		return w.processed
	}
	v := w.q.hub.AppliedNow()
	for c, s := range w.processed {
		if w.f.clusterOK(c) {
			v[c] = s
		}
	}
	return v
}
