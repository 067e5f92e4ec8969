package queryapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

func podEvent(seq uint64, cluster, uid, ns, app string, typ fleetviewv1.EventType) *watchhub.Event {
	ev := &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(podsGVR), Kind: "Pod", Uid: uid, Name: uid, Namespace: ns, Type: typ}
	if typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		ev.Object = []byte(fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"uid":%q,"labels":{"app":%q}}}`, uid, ns, uid, app))
	}
	return watchhub.NewEvent(cluster, seq, ev)
}

func TestWatchJudgesEvents(t *testing.T) {
	up, del := fleetviewv1.EventType_EVENT_TYPE_UPSERT, fleetviewv1.EventType_EVENT_TYPE_DELETE
	type step struct {
		he       *watchhub.Event
		replayed bool
		isNew    bool
	}
	cases := []struct {
		name    string
		sel     string
		ns      string
		horizon uint64
		steps   []step
		want    string
		vis     *query.Visibility
	}{
		{"plain watch", "", "", 0, []step{
			{podEvent(11, "a", "p", "n", "x", up), false, true},
			{podEvent(12, "a", "p", "n", "y", up), false, false},
			{podEvent(12, "a", "p", "n", "y", up), false, false}, // the live feed overlapping a replay
			{podEvent(13, "a", "p", "n", "", del), false, false},
			{podEvent(1, "b", "q", "n", "x", up), true, false}, // a cluster the client never had
		}, "[ADDED:a/p MODIFIED:a/p DELETED:a/p ADDED:b/q]", nil},
		{"label selection: leaving and entering", "app=x", "", 0, []step{
			{podEvent(11, "a", "p", "n", "x", up), false, true},
			{podEvent(12, "a", "p", "n", "y", up), false, false},
			{podEvent(13, "a", "p", "n", "x", up), false, false},
			{podEvent(14, "a", "q", "n", "y", up), false, true}, // never matched: nothing
			{podEvent(15, "a", "q", "n", "", del), false, false},
			{podEvent(16, "a", "p", "n", "", del), false, false},
		}, "[ADDED:a/p DELETED:a/p ADDED:a/p DELETED:a/p]", nil},
		{"resumed label selection: the client may hold what changed before the horizon", "app=x", "", 20, []step{
			{podEvent(11, "a", "r", "n", "y", up), true, false}, // left the selection while disconnected
			{podEvent(12, "a", "s", "n", "", del), true, false}, // deleted while disconnected
			{podEvent(21, "a", "t", "n", "", del), false, false},
		}, "[DELETED:a/r DELETED:a/s]", nil},
		{"namespace filter judges tombstones", "", "n", 0, []step{
			{podEvent(11, "a", "p", "other", "", del), false, false},
			{podEvent(12, "a", "q", "n", "", del), false, false},
		}, "[DELETED:a/q]", nil},
		{"the caller's scope: hidden objects are never sent", "", "", 0, []step{
			{podEvent(11, "a", "p", "kube-system", "x", up), false, true},
			{podEvent(12, "a", "q", "shop", "x", up), false, true},
			{podEvent(13, "a", "p", "kube-system", "", del), false, false},
			{podEvent(2, "b", "r", "shop", "x", up), false, true}, // a hidden cluster
			{podEvent(14, "a", "q", "shop", "", del), false, false},
		}, "[ADDED:a/q DELETED:a/q]", &query.Visibility{Grants: []query.Grant{{Clusters: []string{"a"}, Namespaces: []string{"shop"}}}}},
	}
	for _, tc := range cases {
		// Both forms of the object: its stored JSON (the default) and the
		// Struct a structured watch asks for.
		for _, structured := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/structured=%v", tc.name, structured), func(t *testing.T) {
				sel, err := labels.Parse(tc.sel)
				if err != nil {
					t.Fatal(err)
				}
				w := &watch{f: &selection{gvr: podsGVR, namespace: tc.ns, labels: sel, visible: tc.vis}, out: watchhub.NewQueue[*fleetviewv1.WatchEvent](100),
					versions: newVersionBook(nil, query.NewSealer([]byte("k")), 0, 0), processed: query.Version{"a": 10}, start: query.Version{"a": 10},
					horizon: query.Version{"a": tc.horizon}, sent: map[string]struct{}{}, structured: structured}
				for _, s := range tc.steps {
					he := watchhub.NewEvent(s.he.Cluster, s.he.Seq, s.he.Event) // each run judges fresh events
					he.IsNew = s.isNew
					if err := w.process(he, s.replayed); err != nil {
						t.Fatal(err)
					}
				}
				var got []string
				for ev, ok := w.out.Pop(); ok; ev, ok = w.out.Pop() {
					if structured != (ev.GetObject() != nil) || structured == (len(ev.GetRawObject()) > 0) {
						t.Fatalf("structured=%v: event with Struct %v and %d raw bytes", structured, ev.GetObject() != nil, len(ev.GetRawObject()))
					}
					name := ev.GetObject().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()
					if !structured {
						var m struct {
							Metadata struct{ Name string } `json:"metadata"`
						}
						if err := json.Unmarshal(ev.GetRawObject(), &m); err != nil {
							t.Fatalf("raw object %s: %v", ev.GetRawObject(), err)
						}
						name = m.Metadata.Name
					}
					got = append(got, ev.GetType()+":"+ev.GetCluster()+"/"+name)
				}
				if fmt.Sprint(got) != tc.want {
					t.Fatalf("got %v, want %s", got, tc.want)
				}
			})
		}
	}
}

func TestWatchCutsASlowClient(t *testing.T) {
	w := &watch{f: &selection{gvr: podsGVR, labels: labels.Everything()}, out: watchhub.NewQueue[*fleetviewv1.WatchEvent](1),
		versions: newVersionBook(nil, query.NewSealer([]byte("k")), 0, 0), processed: query.Version{}, start: query.Version{"a": 0}, horizon: query.Version{}, sent: map[string]struct{}{}}
	if err := w.process(podEvent(1, "a", "p", "n", "x", fleetviewv1.EventType_EVENT_TYPE_UPSERT), false); err != nil {
		t.Fatal(err)
	}
	err := w.process(podEvent(2, "a", "p", "n", "x", fleetviewv1.EventType_EVENT_TYPE_UPSERT), false)
	if !errors.Is(err, query.ErrTooSlow) {
		t.Fatalf("full buffer: %v, want ErrTooSlow", err)
	}
}

// What the caller may not see never takes a place in its buffer: a 429
// caused by hidden objects would tell of them.
func TestWatchBufferHoldsVisibleEventsOnly(t *testing.T) {
	w := &watch{f: &selection{gvr: podsGVR, labels: labels.Everything(), visible: &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"shop"}}}}},
		out: watchhub.NewQueue[*fleetviewv1.WatchEvent](1), versions: newVersionBook(nil, query.NewSealer([]byte("k")), 0, 0), processed: query.Version{}, start: query.Version{"a": 0},
		horizon: query.Version{}, sent: map[string]struct{}{}}
	for seq := uint64(1); seq <= 5; seq++ {
		if err := w.process(podEvent(seq, "a", "p", "kube-system", "x", fleetviewv1.EventType_EVENT_TYPE_UPSERT), false); err != nil {
			t.Fatalf("hidden event %d: %v", seq, err)
		}
	}
	if err := w.process(podEvent(6, "a", "q", "shop", "x", fleetviewv1.EventType_EVENT_TYPE_UPSERT), false); err != nil || w.out.Len() != 1 {
		t.Fatalf("visible event: %v, %d queued, want 1", err, w.out.Len())
	}
}

func TestWatchEndsWhenAResourceIsRemoved(t *testing.T) {
	// Also for a namespace-scoped caller: the removal names no namespace.
	for _, vis := range []*query.Visibility{nil, {Grants: []query.Grant{{Namespaces: []string{"shop"}}}}} {
		w := &watch{f: &selection{gvr: podsGVR, labels: labels.Everything(), visible: vis}, out: watchhub.NewQueue[*fleetviewv1.WatchEvent](1),
			versions: newVersionBook(nil, query.NewSealer([]byte("k")), 0, 0), processed: query.Version{}, start: query.Version{}, horizon: query.Version{}, sent: map[string]struct{}{}}
		ev := &fleetviewv1.ResourceEvent{Cluster: "a", Gvr: stream.ProtoGVR(podsGVR), Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}
		if err := w.process(watchhub.NewEvent("a", 5, ev), false); !errors.Is(err, query.ErrExpired) {
			t.Fatalf("visibility %v: got %v, want ErrExpired", vis, err)
		}
	}
}
