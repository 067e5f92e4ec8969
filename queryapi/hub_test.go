package queryapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
			e.Labels, _ = newHubEvent(cluster, e.Seq, e.Event).decode()
			e.Labeled = true
		}
	}
	tr.Tell(evs)
	return feed.Batch{Cluster: cluster, Events: evs, LastSeq: lastSeq}
}

func TestHubNewVersusChangedAndOverflow(t *testing.T) {
	h := NewHub(HubOptions{Buffer: 2})
	tr := feed.NewTracker()
	sub, applied := h.subscribe(podsGVR, nil, nil)
	if len(applied) != 0 {
		t.Fatalf("applied %v before any batch", applied)
	}
	other, _ := h.subscribe(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, nil, nil)
	h.Observe(materialized(tr, "a", []feed.Event{
		told(upsert(1, "a", "old"), true, "x"), // the sink had it
		told(upsert(2, "a", "new"), false, ""), // the sink did not
		upsert(3, "a", "untold"),               // a sink that does not say: first seen
		upsert(4, "a", "untold"),               // seen before
	}, 4))
	b, _ := sub.q.pop()
	var isNew []bool
	for _, e := range b.events {
		isNew = append(isNew, e.isNew)
	}
	if got := fmt.Sprint(isNew); got != "[false true true false]" {
		t.Fatalf("isNew %s, want [false true true false]", got)
	}
	if l, err := b.events[1].decode(); err != nil || l["app"] != "x" {
		t.Fatalf("decode: %v %v", l, err)
	}
	if other.q.len() != 0 {
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
	if _, applied := h.subscribe(podsGVR, nil, nil); applied["a"] != 7 {
		t.Fatalf("applied %v, want a:7", applied)
	}
}

func TestErrorTable(t *testing.T) {
	cases := []struct {
		err    error
		code   int
		reason string
	}{
		{fmt.Errorf("x: %w", query.ErrNotFound), http.StatusNotFound, "NotFound"},
		{fmt.Errorf("x: %w", query.ErrConflict), http.StatusConflict, "Conflict"},
		{fmt.Errorf("x: %w", query.ErrInvalid), http.StatusBadRequest, "BadRequest"},
		{fmt.Errorf("x: %w", query.ErrExpired), http.StatusGone, "Expired"},
		{fmt.Errorf("x: %w", query.ErrTooSlow), http.StatusTooManyRequests, "TooManyRequests"},
		{fmt.Errorf("x: %w", query.ErrTooLargeVersion), http.StatusGatewayTimeout, "Timeout"},
		{fmt.Errorf("x: %w", query.ErrNotReady), http.StatusServiceUnavailable, "ServiceUnavailable"},
		{fmt.Errorf("x: %w", auth.ErrForbidden), http.StatusForbidden, "Forbidden"},
		{fmt.Errorf("x: %w", auth.ErrUnauthenticated), http.StatusUnauthorized, "Unauthorized"},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"},
		{errors.New("boom"), http.StatusInternalServerError, "InternalError"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			code, st := statusBody(apierr.ToStatus(tc.err))
			if code != tc.code || st.Code != tc.code || st.Reason != tc.reason || st.Kind != "Status" || st.Status != "Failure" || st.Message == "" {
				t.Fatalf("%v -> %d %+v, want %d %s", tc.err, code, st, tc.code, tc.reason)
			}
		})
	}
}

func labeled(seq uint64, uid, app string) feed.Event {
	return feed.Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Cluster: "a", Gvr: stream.ProtoGVR(podsGVR), Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"metadata":{"name":"` + uid + `","labels":{"app":"` + app + `"}}}`)}}
}

func TestHubRoutesByLabel(t *testing.T) {
	h := NewHub(HubOptions{})
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	x, _ := h.subscribe(podsGVR, sel("app=x"), nil)
	y, _ := h.subscribe(podsGVR, sel("app in (y)"), nil)
	anyApp, _ := h.subscribe(podsGVR, sel("app"), nil)
	got := func(s *subscription) []uint64 {
		var seqs []uint64
		for b, ok := s.q.pop(); ok; b, ok = s.q.pop() {
			for _, e := range b.events {
				seqs = append(seqs, e.seq)
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
		s    *subscription
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
	h := NewHub(HubOptions{})
	sel, err := labels.Parse("app=y")
	if err != nil {
		t.Fatal(err)
	}
	y, _ := h.subscribe(podsGVR, sel, nil)
	all, _ := h.subscribe(podsGVR, nil, nil)
	h.Observe(feed.Batch{Cluster: "a", Events: []feed.Event{labeled(1, "s", "x"), labeled(2, "s", "x")}, LastSeq: 2})
	for _, tc := range []struct {
		name string
		s    *subscription
	}{{"app=y", y}, {"all", all}} {
		b, _ := tc.s.q.pop()
		if len(b.events) != 2 || !b.events[0].isNew || !b.events[1].isNew {
			t.Errorf("%s: %d events, want both, new", tc.name, len(b.events))
		}
	}
}

func TestQueue(t *testing.T) {
	q := newQueue[int](3)
	for i := range 3 {
		if !q.tryPush(i) {
			t.Fatalf("push %d refused below the limit", i)
		}
	}
	if q.tryPush(3) {
		t.Fatal("a full queue took a fourth item")
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no ready token after pushes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	pushed := make(chan error)
	go func() { pushed <- q.push(ctx, 3) }() // waits for room
	var got []int
	for len(got) < 4 {
		if v, ok := q.pop(); ok {
			got = append(got, v)
			continue
		}
		select {
		case <-q.ready:
		case err := <-pushed:
			if err != nil {
				t.Fatal(err)
			}
			pushed = nil
		}
	}
	if pushed != nil {
		if err := <-pushed; err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[0 1 2 3]" || q.len() != 0 {
		t.Fatalf("popped %v, %d left", got, q.len())
	}
	if _, ok := q.pop(); ok {
		t.Fatal("pop from an empty queue")
	}
	for i := range 3 {
		q.tryPush(i)
	}
	blocked := make(chan error)
	go func() { blocked <- q.push(ctx, 9) }()
	cancel()
	if err := <-blocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("push on a full queue after cancel: %v", err)
	}
}

// TestHubEventTokenShared: every watch that sends a live event sends one
// resourceVersion, sealed once: the hub's version before the batch with
// the event's own sequence. A watch of another selector that the event
// never reached may resume from it, because everything it skipped there
// could not concern it.
func TestHubEventTokenShared(t *testing.T) {
	h := NewHub(HubOptions{})
	sealer := query.NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	_, _, js := natstest.Start(t, -1)
	book := newVersionBook(js, sealer, time.Hour, 1)
	x, _ := h.subscribe(podsGVR, labels.SelectorFromSet(labels.Set{"app": "x"}), nil)
	all, _ := h.subscribe(podsGVR, nil, nil)
	h.Observe(materialized(feed.NewTracker(), "b", []feed.Event{told(labeled(40, "o", "z"), false, "")}, 41))
	h.Observe(materialized(feed.NewTracker(), "a", []feed.Event{told(labeled(7, "p", "x"), false, ""), told(labeled(8, "q", "x"), false, "")}, 9))
	pop := func(s *subscription) []*hubEvent {
		var evs []*hubEvent
		for b, ok := s.q.pop(); ok; b, ok = s.q.pop() {
			evs = append(evs, b.events...)
		}
		return evs
	}
	xs, alls := pop(x), pop(all)
	if len(xs) != 2 || len(alls) != 3 {
		t.Fatalf("routed %d and %d events, want 2 and 3", len(xs), len(alls))
	}
	for i, want := range []query.Version{{"a": 7, "b": 41}, {"a": 8, "b": 41}} {
		rv, ok := xs[i].token(book)
		if !ok {
			t.Fatalf("live event %d has no shared token", i)
		}
		if rv2, _ := alls[i+1].token(book); rv2 != rv {
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
	if _, ok := xs[0].token(newVersionBook(js, query.NewSealer([]byte("another key, another installation")), time.Hour, 1)); ok {
		t.Error("a token sealed with one key was handed out for another")
	}
	if _, ok := newHubEvent("a", 3, labeled(3, "r", "x").Event).token(book); ok {
		t.Error("an event read back from the stream has a shared token: its watch must seal its own")
	}
}

// A watch of some clusters gets their batches only, whatever its labels;
// a fleet-wide watch gets every cluster's.
func TestHubRoutesByCluster(t *testing.T) {
	h := NewHub(HubOptions{})
	tr := feed.NewTracker()
	onA, _ := h.subscribe(podsGVR, labels.SelectorFromSet(labels.Set{"app": "x"}), []string{"a"})
	onAC, _ := h.subscribe(podsGVR, nil, []string{"a", "c"})
	none, _ := h.subscribe(podsGVR, nil, []string{})
	fleet, _ := h.subscribe(podsGVR, nil, nil)
	h.Observe(materialized(tr, "b", []feed.Event{upsert(1, "b", "y")}, 1))
	h.Observe(materialized(tr, "a", []feed.Event{upsert(1, "a", "y")}, 1))
	h.Observe(materialized(tr, "c", []feed.Event{upsert(1, "c", "y")}, 1))
	clustersOf := func(s *subscription) []string {
		var out []string
		for s.q.len() > 0 {
			b, _ := s.q.pop()
			out = append(out, b.cluster)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		sub  *subscription
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
	for _, s := range []*subscription{onA, onAC, none, fleet} {
		h.unsubscribe(s)
	}
	if len(h.byCluster[podsGVR]) != 0 || len(h.all[podsGVR]) != 0 {
		t.Fatalf("left behind: by cluster %v, all %v", h.byCluster[podsGVR], h.all[podsGVR])
	}
}
