package feed

import (
	"fmt"
	"testing"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var pods = &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}

// upsert is an upsert as the materializer hands it over: labeled.
func upsert(seq uint64, uid string, labels map[string]string) Event {
	return Event{Seq: seq, Labels: labels, Labeled: true, Event: &fleetviewv1.ResourceEvent{Gvr: pods, Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT}}
}

func del(seq uint64, uid string) Event {
	return Event{Seq: seq, Event: &fleetviewv1.ResourceEvent{Gvr: pods, Uid: uid, Name: uid, Type: fleetviewv1.EventType_EVENT_TYPE_DELETE}}
}

// prior renders what an observer reads of a Prior: whether the object
// existed, and its label app (or ? when unknown).
func prior(p Prior) string {
	if !p.Told {
		return "untold"
	}
	app := "?"
	if !p.LabelsUnknown {
		v, ok := p.Label("app")
		app = fmt.Sprintf("%q", v)
		if !ok {
			app = "-"
		}
	}
	return fmt.Sprintf("exists=%v app=%s", p.Exists, app)
}

func TestTrackerTellsWhatTheSinkDoesNot(t *testing.T) {
	removed := Event{Seq: 9, Event: &fleetviewv1.ResourceEvent{Gvr: pods, Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED}}
	synced := Event{Seq: 10, Event: &fleetviewv1.ResourceEvent{Gvr: pods, Type: fleetviewv1.EventType_EVENT_TYPE_SYNCED}}
	toldBySink := upsert(12, "p", map[string]string{"app": "y"})
	toldBySink.Prior = Prior{Told: true, Exists: true, Labels: map[string]string{"app": "sink"}}
	unlabeled := upsert(14, "u", nil)
	unlabeled.Labeled = false
	deployments := upsert(17, "p", nil)
	deployments.Event.Gvr = &fleetviewv1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	evs := []Event{
		upsert(1, "s", map[string]string{"app": "z"}), // not seen since start: it may have had any labels
		upsert(2, "s", map[string]string{"app": "x"}), // seen with z, now x
		del(3, "s"),         // had x
		upsert(4, "s", nil), // deleted before: new again
		upsert(5, "s", map[string]string{"app": ""}),
		upsert(6, "s", map[string]string{"app": "w", "tier": "a"}),
		del(7, "never"), // a delete of an object never seen
		upsert(8, "p", map[string]string{"app": "x"}),
		removed,              // forgets every pod
		synced,               // not an object event
		upsert(11, "p", nil), // forgotten with its resource
		toldBySink,           // left as the sink told it
		upsert(13, "p", nil), // the told event is not remembered: still {}
		unlabeled,            // remembered with labels unknown
		upsert(15, "u", nil),
		upsert(16, "u", map[string]string{"app": "v"}),
		deployments, // another resource, same uid: unseen
	}
	NewTracker().Tell(evs)
	want := []string{
		"exists=false app=?",
		`exists=true app="z"`,
		`exists=true app="x"`,
		"exists=false app=?",
		"exists=true app=-",
		`exists=true app=""`,
		"exists=false app=?",
		"exists=false app=?",
		"untold",
		"untold",
		"exists=false app=?",
		`exists=true app="sink"`,
		"exists=true app=-",
		"exists=false app=?",
		"exists=true app=?",
		"exists=true app=-",
		"exists=false app=?",
	}
	for i, e := range evs {
		if got := prior(e.Prior); got != want[i] {
			t.Errorf("seq %d: %s, want %s", e.Seq, got, want[i])
		}
	}
}

func TestTrackerKeepsNoPointersToLabels(t *testing.T) {
	labels := map[string]string{"app": "x"}
	tr := NewTracker()
	tr.Tell([]Event{upsert(1, "a", labels)})
	labels["app"] = "changed by the caller"
	evs := []Event{upsert(2, "a", nil)}
	tr.Tell(evs)
	if v, _ := evs[0].Prior.Label("app"); v != "x" {
		t.Fatalf("app %q, want x: the tracker must copy the labels it keeps", v)
	}
}

func TestPriorLabelPrefersTheSinksMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Prior
		key  string
		want string
	}{
		{"map", Prior{Labels: map[string]string{"a": "1"}}, "a", "1 true"},
		{"map, missing", Prior{Labels: map[string]string{"a": "1"}}, "b", " false"},
		{"encoded", Prior{encoded: encodeLabels(map[string]string{"a": "1", "b": "2"})}, "b", "2 true"},
		{"encoded, prefix of a key", Prior{encoded: encodeLabels(map[string]string{"ab": "1"})}, "a", " false"},
		{"none", Prior{}, "a", " false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := tc.p.Label(tc.key)
			if got := fmt.Sprint(v, " ", ok); got != tc.want {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}
