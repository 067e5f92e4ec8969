package queryapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// told is e as a sink that reads the previous state (Badger's) hands it
// over: with what it replaced.
func told(e feed.Event, exists bool, app string) feed.Event {
	e.Prior = feed.Prior{Told: true, Exists: exists}
	if app != "" {
		e.Prior.Labels = map[string]string{"app": app}
	}
	return e
}

// materialized is a batch as the materializer publishes it: upserts
// labeled, and the prior state a sink did not tell given by its tracker.
func materialized(tr *feed.Tracker, cluster string, evs []feed.Event, lastSeq uint64) feed.Batch {
	for i := range evs {
		e := &evs[i]
		if e.Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT && !e.Labeled {
			e.Labels, _ = watchhub.NewEvent(cluster, e.Seq, e.Event).Labels()
			e.Labeled = true
		}
	}
	tr.Tell(evs)
	return feed.Batch{Cluster: cluster, Events: evs, LastSeq: lastSeq}
}

func labeled(seq uint64, uid, app string) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "a", Gvr: stream.ProtoGVR(podsGVR), Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"metadata":{"name":"` + uid + `","labels":{"app":"` + app + `"}}}`)}}
}

// TestHubEventTokenShared: every watch that sends a live event sends one
// resourceVersion, sealed once: the hub's version before the batch with
// the event's own sequence. A watch of another selector that the event
// never reached may resume from it, because everything it skipped there
// could not concern it.
func TestHubEventTokenShared(t *testing.T) {
	h := watchhub.New(watchhub.Options{})
	sealer := query.NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	_, _, js := natstest.Start(t, -1)
	book := newVersionBook(js, sealer, time.Hour, 1)
	x, _ := h.Subscribe(podsGVR, labels.SelectorFromSet(labels.Set{"app": "x"}), nil)
	all, _ := h.Subscribe(podsGVR, nil, nil)
	h.Observe(materialized(feed.NewTracker(), "b", []feed.Event{told(labeled(40, "o", "z"), false, "")}, 41))
	h.Observe(materialized(feed.NewTracker(), "a", []feed.Event{told(labeled(7, "p", "x"), false, ""), told(labeled(8, "q", "x"), false, "")}, 9))
	pop := func(s *watchhub.Subscription) []*watchhub.Event {
		var evs []*watchhub.Event
		for b, ok := s.Batches().Pop(); ok; b, ok = s.Batches().Pop() {
			evs = append(evs, b.Events...)
		}
		return evs
	}
	xs, alls := pop(x), pop(all)
	if len(xs) != 2 || len(alls) != 3 {
		t.Fatalf("routed %d and %d events, want 2 and 3", len(xs), len(alls))
	}
	for i, want := range []query.Version{{"a": 7, "b": 41}, {"a": 8, "b": 41}} {
		rv, ok := xs[i].Token(book)
		if !ok {
			t.Fatalf("live event %d has no shared token", i)
		}
		if rv2, _ := alls[i+1].Token(book); rv2 != rv {
			t.Errorf("event %d: watches send different versions %q and %q", i, rv, rv2)
		}
		tok, err := book.open(context.Background(), rv)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(tok.Seqs) != fmt.Sprint(want) {
			t.Errorf("event %d: version %v, want %v", i, tok.Seqs, want)
		}
	}
	if _, ok := xs[0].Token(newVersionBook(js, query.NewSealer([]byte("another key, another installation")), time.Hour, 1)); ok {
		t.Error("a token sealed with one key was handed out for another")
	}
	if _, ok := watchhub.NewEvent("a", 3, labeled(3, "r", "x").Event).Token(book); ok {
		t.Error("an event read back from the stream has a shared token: its watch must seal its own")
	}
}
