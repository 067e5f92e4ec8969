package queryapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// fakeReplayer is a history of recorded changes and its window.
type fakeReplayer struct {
	window query.HistoryWindow
	revs   []query.Revision
}

func (f *fakeReplayer) ChangesAfter(_ context.Context, _ string, _ schema.GroupVersionResource, from, to uint64, fn func(query.Revision) error) error {
	for _, r := range f.revs {
		if r.Seq > from && r.Seq <= to {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeReplayer) HistoryWindow(context.Context) (query.HistoryWindow, error) {
	return f.window, nil
}

// TestHistoryResumeWindow: a version is resumable while the window holds
// every change after it in each of its clusters, 410 Expired once the
// window has passed it.
func TestHistoryResumeWindow(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	q := &queryService{replayer: &fakeReplayer{window: query.HistoryWindow{Start: start, Seq: map[string]uint64{"a": 10, "b": 0}}}}
	cases := []struct {
		name    string
		seqs    query.Version
		issued  time.Time
		expired bool
	}{
		{"at the floor", query.Version{"a": 10, "b": 3}, time.Now(), false},
		{"past the floor", query.Version{"a": 11}, time.Now(), false},
		{"before the floor", query.Version{"a": 9, "b": 3}, time.Now(), true},
		{"nothing recorded, issued in the window", query.Version{"c": 5}, time.Now(), false},
		{"nothing recorded, issued before the window", query.Version{"c": 5}, start.Add(-time.Minute), true},
	}
	for _, tc := range cases {
		err := q.checkHistoryResume(context.Background(), "rv", query.VersionToken{Seqs: tc.seqs, Issued: tc.issued.Unix()}, schema.GroupVersionResource{Version: "v1", Resource: "pods"})
		if got := errors.Is(err, query.ErrExpired); got != tc.expired || err != nil && !tc.expired {
			t.Errorf("%s: %v, want expired=%v", tc.name, err, tc.expired)
		}
	}
	// A resource routed to another backend has no history: the window
	// does not judge it (the stream's MaxResumeAge does).
	routed := &queryService{replayer: q.replayer, backends: routedElsewhere{}}
	if err := routed.checkHistoryResume(context.Background(), "rv", query.VersionToken{Seqs: query.Version{"a": 1}}, schema.GroupVersionResource{}); err != nil {
		t.Errorf("routed elsewhere: %v", err)
	}
	if routed.historyKeeps("a", schema.GroupVersionResource{}) || !routed.streamReplayed(query.VersionToken{Seqs: query.Version{"a": 1}}, schema.GroupVersionResource{}) {
		t.Error("a resource routed elsewhere is replayed from the history")
	}
	empty := &queryService{replayer: &fakeReplayer{}}
	if err := empty.checkHistoryResume(context.Background(), "rv", query.VersionToken{Seqs: query.Version{"a": 1}}, schema.GroupVersionResource{}); !errors.Is(err, query.ErrExpired) {
		t.Errorf("no history yet: %v", err)
	}
}

// TestHistoryReplayEvents: each recorded change becomes the stream event
// it was, ADDED told from MODIFIED, a delete a tombstone.
func TestHistoryReplayEvents(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	rev := func(seq uint64, typ query.ChangeType, obj string) query.Revision {
		return query.Revision{Change: query.Change{Cluster: "a", GVR: pods, Namespace: "ns", Name: "web", UID: "u", Seq: seq, Type: typ, ResourceVersion: "1"}, Object: []byte(obj)}
	}
	f := &fakeReplayer{revs: []query.Revision{
		rev(1, query.ChangeAdded, `{"kind":"Pod","metadata":{"labels":{"v":"1"}}}`),
		rev(2, query.ChangeModified, `{"kind":"Pod","metadata":{"labels":{"v":"2"}}}`),
		rev(3, query.ChangeModified, `{"kind":"Pod","metadata":{"labels":{"v":"3"}}}`),
		rev(4, query.ChangeDeleted, `{"kind":"Pod","metadata":{"labels":{"v":"3"}}}`),
	}}
	q := &queryService{replayer: f}
	var got []string
	err := q.replayHistory(context.Background(), "a", pods, 1, 4, func(he *watchhub.Event) error {
		got = append(got, he.Event.GetType().String()+" "+string(he.Event.GetObject()))
		if he.IsNew || he.Event.GetKind() != "Pod" && he.Event.GetType() != fleetviewv1.EventType_EVENT_TYPE_DELETE {
			t.Errorf("seq %d: new=%v kind %q", he.Seq, he.IsNew, he.Event.GetKind())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`EVENT_TYPE_UPSERT {"kind":"Pod","metadata":{"labels":{"v":"2"}}}`,
		`EVENT_TYPE_UPSERT {"kind":"Pod","metadata":{"labels":{"v":"3"}}}`,
		`EVENT_TYPE_DELETE `,
	}
	if len(got) != len(want) {
		t.Fatalf("replayed %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// routedElsewhere serves every resource from a named backend.
type routedElsewhere struct{ BackendHealth }

func (routedElsewhere) BackendOf(string, schema.GroupVersionResource) (string, string) {
	return "os", "opensearch"
}
