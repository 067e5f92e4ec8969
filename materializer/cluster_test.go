package materializer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// streamMsg is a stream message as the fetching stage sees it.
type streamMsg struct {
	jetstream.Msg
	subject string
	data    []byte
	md      *jetstream.MsgMetadata
}

func (m streamMsg) Subject() string                           { return m.subject }
func (m streamMsg) Data() []byte                              { return m.data }
func (m streamMsg) Metadata() (*jetstream.MsgMetadata, error) { return m.md, nil }

// An object event is applied only when its subject, its payload's cluster,
// the stream it came from and its cluster annotations all name one cluster;
// otherwise it goes to the dead letters with its reason, as every poison
// event does.
func TestEventOfAnotherClusterIsDeadLettered(t *testing.T) {
	ctx, m, dead := deadLetterFixture(t)
	const subj = "fv.obj.c.core.v1.pods.u1"
	obj := func(meta string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","uid":"u1"` + meta + `},"spec":{}}`
	}
	for i, tc := range []struct {
		name    string
		cluster string // in the payload
		subject string
		stream  string
		object  string
		wantErr error // nil: applied
	}{
		{"all agree", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":"c","resource.karmada.io/cached-from-cluster":"c"}`), nil},
		{"no cluster annotations", "c", subj, "FV_c", obj(``), nil},
		{"annotation names another cluster", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":"d"}`), errWrongCluster},
		{"Karmada annotation names another cluster", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":"c","resource.karmada.io/cached-from-cluster":"d"}`), errWrongCluster},
		{"duplicate annotation, the last another cluster", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":"c","fleetview.io/cluster":"d"}`), errWrongCluster},
		{"escaped annotation key", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io\/cluster":"d"}`), errWrongCluster},
		{"second metadata member", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":"c"}},"metadata":{"annotations":{"fleetview.io/cluster":"d"}`), errWrongCluster},
		{"annotation not a string", "c", subj, "FV_c", obj(`,"annotations":{"fleetview.io/cluster":1}`), errBadJSON},
		{"payload names another cluster than the subject", "d", subj, "FV_c", obj(``), stream.ErrBadEvent},
		{"read from another cluster's stream", "c", subj, "FV_d", obj(`,"annotations":{"fleetview.io/cluster":"c"}`), errWrongCluster},
		{"read from a stream that is no cluster's", "c", subj, "OTHER", obj(``), errWrongCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &fleetviewv1.ResourceEvent{Cluster: tc.cluster, Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
				Uid: "u1", Name: "p", Namespace: "ns", ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(tc.object)}
			data, err := stream.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			seq := uint64(i + 1)
			msg := streamMsg{subject: tc.subject, data: data, md: &jetstream.MsgMetadata{Stream: tc.stream, Sequence: jetstream.SequencePair{Stream: seq}}}
			var b batch
			m.add(&b, msg, tc.stream, seq, 0)
			if tc.wantErr == nil {
				if len(b.bad) != 0 || len(b.evs) != 1 {
					t.Fatalf("not applied: bad %v", b.bad)
				}
				return
			}
			if len(b.evs) != 0 || len(b.bad) != 1 || !errors.Is(b.bad[0].reason, tc.wantErr) {
				t.Fatalf("events %d, bad %v: want one dead letter for %v", len(b.evs), b.bad, tc.wantErr)
			}
			applied, err := m.dropPoison(ctx, b, func([]feed.Event) error { return nil })
			if err != nil || len(applied) != 0 {
				t.Fatalf("dropPoison: %v %v", applied, err)
			}
			dl, err := dead.GetLastMsgForSubject(ctx, DeadSubject("t"))
			if err != nil {
				t.Fatal(err)
			}
			if dl.Header.Get(HdrDeadSubject) != tc.subject || dl.Header.Get(HdrDeadStream) != tc.stream ||
				!strings.Contains(dl.Header.Get(HdrDeadReason), tc.wantErr.Error()) {
				t.Fatalf("dead letter headers %v", dl.Header)
			}
		})
	}
}

// An object that is not valid JSON by the whole grammar, anywhere in it,
// is dead-lettered with a reason naming what is wrong and where, never
// applied; the valid object after it in the same batch is applied.
func TestMalformedObjectIsDeadLettered(t *testing.T) {
	ctx, m, dead := deadLetterFixture(t)
	const meta = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","uid":"u1","annotations":{"fleetview.io/cluster":"c"}}`
	for i, tc := range []struct {
		name, object, reason string
	}{
		{"the forged Pod's spec", meta + `,"spec":{"a" 1 2}}`, "':' expected after an object key at offset"},
		{"value after a value", meta + `,"spec":{"a":[1 2]}}`, "',' or ']' expected"},
		{"trailing comma", meta + `,"spec":{"a":1,}}`, "object key expected"},
		{"closed early", meta + `},{"kind":"Injected"}`, "trailing data after the object"},
		{"leading zero", meta + `,"spec":{"a":01}}`, "',' or '}' expected"},
		{"bad literal", meta + `,"spec":{"a":nul}}`, "invalid literal"},
		{"bad escape", meta + `,"spec":{"a":"\q"}}`, "invalid escape"},
		{"control byte", meta + ",\"spec\":{\"a\":\"\x01\"}}", "control character"},
		{"invalid UTF-8", meta + ",\"spec\":{\"a\":\"\xc3\"}}", "invalid UTF-8"},
		{"too deep", meta + `,"spec":` + strings.Repeat("[", rawjson.MaxDepth) + strings.Repeat("]", rawjson.MaxDepth) + `}`, "nested deeper than 512 levels"},
		// As large as a message may be: its dead letter, with the reason's
		// headers, would not fit, and keeps what does.
		{"as large as a message may be", meta + `,"spec":{"a":"` + strings.Repeat("x", stream.MaxPayload-200) + `" 1}}`, "',' or '}' expected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := func(uid, object string) []byte {
				ev := &fleetviewv1.ResourceEvent{Cluster: "c", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
					Uid: uid, Name: "p", Namespace: "ns", ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(object)}
				data, err := stream.Encode(ev)
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
			seq := uint64(2*i + 1)
			var b batch
			m.add(&b, streamMsg{subject: "fv.obj.c.core.v1.pods.u1", data: enc("u1", tc.object),
				md: &jetstream.MsgMetadata{Stream: "FV_c", Sequence: jetstream.SequencePair{Stream: seq}}}, "FV_c", seq, 0)
			good := strings.ReplaceAll(meta, "u1", "u2") + `,"spec":{"a":[1,2]}}`
			m.add(&b, streamMsg{subject: "fv.obj.c.core.v1.pods.u2", data: enc("u2", good),
				md: &jetstream.MsgMetadata{Stream: "FV_c", Sequence: jetstream.SequencePair{Stream: seq + 1}}}, "FV_c", seq+1, 0)
			if len(b.bad) != 1 || !errors.Is(b.bad[0].reason, errBadJSON) || len(b.evs) != 1 || b.evs[0].Seq != seq+1 {
				t.Fatalf("bad %v, events %v: want the first dead, the second applied", b.bad, b.evs)
			}
			applied, err := m.dropPoison(ctx, b, func([]feed.Event) error { return nil })
			if err != nil || len(applied) != 1 || applied[0].Event.GetUid() != "u2" {
				t.Fatalf("dropPoison: %v %v", applied, err)
			}
			dl, err := dead.GetLastMsgForSubject(ctx, DeadSubject("t"))
			if err != nil {
				t.Fatal(err)
			}
			reason := dl.Header.Get(HdrDeadReason)
			if dl.Header.Get(HdrDeadSubject) != "fv.obj.c.core.v1.pods.u1" || !strings.Contains(reason, tc.reason) || !strings.Contains(reason, "ns/p") {
				t.Fatalf("dead letter reason %q, want it to name ns/p and %q", reason, tc.reason)
			}
			data := enc("u1", tc.object)
			if trunc := dl.Header.Get(HdrDeadTruncated); len(data) > stream.MaxPayload-100 { // the headers take more
				if trunc != fmt.Sprint(len(data)) || len(dl.Data) >= len(data) || !bytes.HasPrefix(data, dl.Data) {
					t.Fatalf("dead letter of %d bytes: truncated %q, kept %d bytes", len(data), trunc, len(dl.Data))
				}
			} else if trunc != "" || !bytes.Equal(dl.Data, data) {
				t.Fatalf("dead letter truncated %q, data equal %v", trunc, bytes.Equal(dl.Data, data))
			}
		})
	}
}

// deadLetterFixture is a materializer named "t" on an embedded NATS server,
// with the dead-letter stream it writes to.
func deadLetterFixture(t *testing.T) (context.Context, *Materializer, jetstream.Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, nc, js := natstest.Start(t, -1)
	m, err := New(Config{Name: "t", NATS: nc, Sink: fakeSink{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureDeadLetterStream(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	dead, err := js.Stream(ctx, DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, m, dead
}
