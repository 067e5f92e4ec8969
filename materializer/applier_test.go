package materializer

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// ackMsg is a stream message whose only use here is its acknowledgement.
type ackMsg struct{ jetstream.Msg }

func (ackMsg) Ack() error { return nil }

// fakeSink applies nothing; when tells, it says every object existed with
// app=sink, as Badger's does with what it read.
type fakeSink struct{ tells bool }

func (s fakeSink) Apply(_ context.Context, _ string, evs []feed.Event, _ uint64) error {
	for i := range evs {
		if s.tells && stream.IsObjectEvent(evs[i].Event) {
			evs[i].Prior = feed.Prior{Told: true, Exists: true, Labels: map[string]string{"app": "sink"}}
		}
	}
	return nil
}

func (fakeSink) Checkpoint(context.Context, string) (uint64, error) { return 0, nil }

func upsertEvent(seq uint64, uid, app string) feed.Event {
	return feed.Event{Seq: seq, Labels: map[string]string{"app": app}, Labeled: true, Event: &fleetviewv1.ResourceEvent{
		Cluster: "c", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"}, Uid: uid, Name: uid,
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT}}
}

func describe(p feed.Prior) string {
	if !p.Told {
		return "untold"
	}
	app, _ := p.Label("app")
	return fmt.Sprintf("exists=%v unknown=%v app=%s", p.Exists, p.LabelsUnknown, app)
}

// TestObserverSeesEveryPriorState: whatever the sink, the observer gets
// each object event with what it replaced, and the memory of a sink that
// does not tell survives its consumer's restart.
func TestObserverSeesEveryPriorState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tells bool
		want  []string
	}{
		{"sink tells", true, []string{"exists=true unknown=false app=sink", "exists=true unknown=false app=sink"}},
		{"sink does not tell", false, []string{"exists=false unknown=true app=", "exists=true unknown=false app=x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			m := &Materializer{log: slog.New(slog.DiscardHandler), applied: map[string]uint64{}, priors: map[string]*feed.Tracker{},
				cfg: Config{Sink: fakeSink{tc.tells}, Observer: func(b feed.Batch) {
					if b.Cluster != "c" {
						t.Errorf("cluster %q", b.Cluster)
					}
					for _, e := range b.Events {
						got = append(got, describe(e.Prior))
					}
				}}}
			// Two consumers of the stream one after the other, as after a
			// restart: the second must remember what the first applied.
			for seq := uint64(1); seq <= 2; seq++ {
				a := m.newApplier("c")
				b := batch{evs: []feed.Event{upsertEvent(seq, "p", "x")}, msgs: []jetstream.Msg{ackMsg{}}, last: ackMsg{}, seq: seq}
				if err := a.apply(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				if err := a.finish(); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("observed %q, want %q", got, tc.want)
			}
			if m.Applied()["c"] != 2 {
				t.Fatalf("applied %v, want c:2", m.Applied())
			}
		})
	}
}

func TestNoTrackerWithoutObserver(t *testing.T) {
	m := &Materializer{priors: map[string]*feed.Tracker{}, cfg: Config{Sink: fakeSink{}}}
	if m.tracker("c") != nil || len(m.priors) != 0 {
		t.Fatal("a materializer nobody observes must not remember objects")
	}
}
