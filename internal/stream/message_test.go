package stream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func TestObjectMsg(t *testing.T) {
	ev := func(typ fleetviewv1.EventType) *fleetviewv1.ResourceEvent {
		return &fleetviewv1.ResourceEvent{
			Cluster: "m1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret",
			Uid: "u1", Namespace: "ns", Name: "s", ResourceVersion: "7", Type: typ, Object: []byte(`{}`),
		}
	}
	upsert, del := fleetviewv1.EventType_EVENT_TYPE_UPSERT, fleetviewv1.EventType_EVENT_TYPE_DELETE
	for _, tc := range []struct {
		name       string
		ev         *fleetviewv1.ResourceEvent
		o          ObjectMsgOptions
		msgID      string
		secretData string
		ttl        string
	}{
		{"upsert", ev(upsert), ObjectMsgOptions{}, "u1/7/EVENT_TYPE_UPSERT", "", ""},
		{"upsert keeping Secret data", ev(upsert), ObjectMsgOptions{SecretDataKept: true}, "u1/7/EVENT_TYPE_UPSERT/kept", "kept", ""},
		{"tombstone", ev(del), ObjectMsgOptions{TTL: time.Hour}, "u1/7/EVENT_TYPE_DELETE", "", "1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := ObjectMsg(tc.ev, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if want := ObjectSubject("m1", GVR(tc.ev.Gvr), "u1"); msg.Subject != want {
				t.Errorf("subject %q, want %q", msg.Subject, want)
			}
			back, err := Decode(msg.Subject, msg.Data)
			if err != nil || back.GetResourceVersion() != "7" {
				t.Errorf("payload decodes to %v, %v", back, err)
			}
			h := msg.Header
			for k, want := range map[string]string{
				HdrType: tc.ev.Type.String(), HdrRV: "7", HdrNamespace: "ns", HdrName: "s",
				HdrSecretData: tc.secretData, jetstream.MsgIDHeader: tc.msgID, jetstream.MsgTTLHeader: tc.ttl,
			} {
				if got := h.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}
