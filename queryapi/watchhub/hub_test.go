package watchhub

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func upsert(seq uint64, cluster, uid string) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(podsGVR), Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"metadata":{"name":"` + uid + `","labels":{"app":"x"}}}`)}}
}

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
			e.Labels, _ = NewEvent(cluster, e.Seq, e.Event).Labels()
			e.Labeled = true
		}
	}
	tr.Tell(evs)
	return feed.Batch{Cluster: cluster, Events: evs, LastSeq: lastSeq}
}

func TestHubNewVersusChangedAndOverflow(t *testing.T) {
	h := New(Options{Buffer: 2})
	tr := feed.NewTracker()
	sub, applied := h.Subscribe(podsGVR, nil, nil)
	if len(applied) != 0 {
		t.Fatalf("applied %v before any batch", applied)
	}
	other, _ := h.Subscribe(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, nil, nil)
	h.Observe(materialized(tr, "a", []feed.Event{
		told(upsert(1, "a", "old"), true, "x"), // the sink had it
		told(upsert(2, "a", "new"), false, ""), // the sink did not
		upsert(3, "a", "untold"),               // a sink that does not say: first seen
		upsert(4, "a", "untold"),               // seen before
	}, 4))
	b, _ := sub.q.Pop()
	var isNew []bool
	for _, e := range b.Events {
		isNew = append(isNew, e.IsNew)
	}
	if got := fmt.Sprint(isNew); got != "[false true true false]" {
		t.Fatalf("isNew %s, want [false true true false]", got)
	}
	if l, err := b.Events[1].Labels(); err != nil || l["app"] != "x" {
		t.Fatalf("decode: %v %v", l, err)
	}
	if other.q.Len() != 0 {
		t.Fatal("a pods batch reached a deployments watch")
	}
	// The watch does not read: the third batch overflows its buffer of 2.
	for i := uint64(5); i <= 7; i++ {
		h.Observe(materialized(tr, "a", []feed.Event{upsert(i, "a", "new")}, i))
	}
	select {
	case <-sub.overflow:
	default:
		t.Fatal("a full watch buffer must cut the watch, not block or grow")
	}
	if _, applied := h.Subscribe(podsGVR, nil, nil); applied["a"] != 7 {
		t.Fatalf("applied %v, want a:7", applied)
	}
}

func labeled(seq uint64, uid, app string) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "a", Gvr: stream.ProtoGVR(podsGVR), Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"metadata":{"name":"` + uid + `","labels":{"app":"` + app + `"}}}`)}}
}

func TestHubRoutesByLabel(t *testing.T) {
	h := New(Options{})
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	x, _ := h.Subscribe(podsGVR, sel("app=x"), nil)
	y, _ := h.Subscribe(podsGVR, sel("app in (y)"), nil)
	anyApp, _ := h.Subscribe(podsGVR, sel("app"), nil)
	got := func(s *Subscription) []uint64 {
		var seqs []uint64
		for b, ok := s.q.Pop(); ok; b, ok = s.q.Pop() {
			for _, e := range b.Events {
				seqs = append(seqs, e.Seq)
			}
		}
		return seqs
	}
	del := func(seq uint64, uid string) feed.Event {
		return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "a", Gvr: stream.ProtoGVR(podsGVR), Uid: uid, Name: uid, Type: fleetviewv1.EventType_EVENT_TYPE_DELETE}}
	}
	unknown := labeled(4, "r", "z")
	unknown.Prior = feed.Prior{Told: true, Exists: true, LabelsUnknown: true}
	h.Observe(materialized(feed.NewTracker(), "a", []feed.Event{
		told(labeled(1, "p", "x"), false, ""), // new object: routed by its labels only
		told(labeled(2, "p", "y"), true, "x"), // moves x -> y: both must hear of it
		told(labeled(3, "q", "z"), false, ""), // neither
		unknown,                               // labels before unknown: everyone
		told(del(5, "p"), true, "y"),          // deleted while it had y
		// A sink that does not tell: the materializer's memory of labels.
		labeled(6, "s", "z"), // not seen since the hub started: it may have had any labels
		labeled(7, "s", "x"), // seen with z, now x
		del(8, "s"),          // had x
	}, 8))
	for _, tc := range []struct {
		name string
		s    *Subscription
		want string
	}{{"app=x", x, "[1 2 4 6 7 8]"}, {"app in (y)", y, "[2 4 5 6]"}, {"app (not indexable)", anyApp, "[1 2 3 4 5 6 7 8]"}} {
		if g := fmt.Sprint(got(tc.s)); g != tc.want {
			t.Errorf("%s got %s, want %s", tc.name, g, tc.want)
		}
	}
}

// TestHubUntoldIsNew: an event that reaches the hub without a prior state
// (the materializer always gives one) is taken as a new object whose
// labels may have been anything, never guessed from earlier events.
func TestHubUntoldIsNew(t *testing.T) {
	h := New(Options{})
	sel, err := labels.Parse("app=y")
	if err != nil {
		t.Fatal(err)
	}
	y, _ := h.Subscribe(podsGVR, sel, nil)
	all, _ := h.Subscribe(podsGVR, nil, nil)
	h.Observe(feed.Batch{Cluster: "a", Events: []feed.Event{labeled(1, "s", "x"), labeled(2, "s", "x")}, LastSeq: 2})
	for _, tc := range []struct {
		name string
		s    *Subscription
	}{{"app=y", y}, {"all", all}} {
		b, _ := tc.s.q.Pop()
		if len(b.Events) != 2 || !b.Events[0].IsNew || !b.Events[1].IsNew {
			t.Errorf("%s: %d events, want both, new", tc.name, len(b.Events))
		}
	}
}

// A watch of some clusters gets their batches only, whatever its labels;
// a fleet-wide watch gets every cluster's.
func TestHubRoutesByCluster(t *testing.T) {
	h := New(Options{})
	tr := feed.NewTracker()
	onA, _ := h.Subscribe(podsGVR, labels.SelectorFromSet(labels.Set{"app": "x"}), []string{"a"})
	onAC, _ := h.Subscribe(podsGVR, nil, []string{"a", "c"})
	none, _ := h.Subscribe(podsGVR, nil, []string{})
	fleet, _ := h.Subscribe(podsGVR, nil, nil)
	h.Observe(materialized(tr, "b", []feed.Event{upsert(1, "b", "y")}, 1))
	h.Observe(materialized(tr, "a", []feed.Event{upsert(1, "a", "y")}, 1))
	h.Observe(materialized(tr, "c", []feed.Event{upsert(1, "c", "y")}, 1))
	clustersOf := func(s *Subscription) []string {
		var out []string
		for s.q.Len() > 0 {
			b, _ := s.q.Pop()
			out = append(out, b.Cluster)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		sub  *Subscription
		want string
	}{
		{"cluster a, labels left to the watch", onA, "[a]"},
		{"clusters a and c", onAC, "[a c]"},
		{"no cluster", none, "[]"},
		{"the fleet", fleet, "[b a c]"},
	} {
		if got := fmt.Sprint(clustersOf(tc.sub)); got != tc.want {
			t.Errorf("%s: batches of %s, want %s", tc.name, got, tc.want)
		}
	}
	for _, s := range []*Subscription{onA, onAC, none, fleet} {
		h.Unsubscribe(s)
	}
	if len(h.byCluster[podsGVR]) != 0 || len(h.all[podsGVR]) != 0 {
		t.Fatalf("left behind: by cluster %v, all %v", h.byCluster[podsGVR], h.all[podsGVR])
	}
}
