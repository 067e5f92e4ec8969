package natsserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// TestActChannelIsolation: the request channel (issue #30) between the hub
// and a cluster's collector. The hub's request for edge-a reaches edge-a's
// collector and no one else; edge-a's answer reaches the hub; nothing
// edge-a's credential sends can be a request (to itself or to anyone) or an
// answer for edge-b.
func TestActChannelIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startIsolation(t, ctx)
	hub, err := nats.Connect(f.srv.ClientURL(), nats.UserInfo(HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()

	sub := func(nc *nats.Conn, subject string) chan *nats.Msg {
		t.Helper()
		ch := make(chan *nats.Msg, 16)
		if _, err := nc.ChanSubscribe(subject, ch); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	// Messages the server delivered by the time a later message on a
	// watched subject arrives (each connection's messages keep their order).
	none := func(name string, ch chan *nats.Msg) {
		t.Helper()
		select {
		case m := <-ch:
			t.Errorf("%s received %s %q", name, m.Subject, m.Data)
		default:
		}
	}
	got := func(name string, ch chan *nats.Msg, data string) {
		t.Helper()
		select {
		case m := <-ch:
			if string(m.Data) != data {
				t.Errorf("%s received %q, want %q", name, m.Data, data)
			}
		case <-ctx.Done():
			t.Fatalf("%s received nothing", name)
		}
	}

	aReq := sub(f.a, natsnames.ActRequests("edge-a"))
	bReq := sub(f.b, natsnames.ActRequests("edge-b"))
	hubResp := sub(hub, "fv.act.*.resp.>")
	// edge-b subscribing to edge-a's requests is refused by its
	// permissions (and its account holds no such import anyway).
	bSpy, err := f.b.SubscribeSync(natsnames.ActRequests("edge-a"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.b.Flush()

	if err := hub.Publish(natsnames.ActRequest("edge-a", "r1"), []byte("for a")); err != nil {
		t.Fatal(err)
	}
	got("edge-a's collector", aReq, "for a")
	none("edge-b's collector", bReq)
	if m, err := bSpy.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("edge-b read edge-a's request %q", m.Data)
	}

	// edge-a answers its own request: the hub receives it.
	if err := f.a.Publish(natsnames.ActResponse("edge-a", "r1"), []byte("answer a")); err != nil {
		t.Fatal(err)
	}
	got("the hub", hubResp, "answer a")

	// Forgeries with edge-a's credential, each refused by the server.
	for _, tc := range []struct{ name, subject string }{
		{"a request to its own collector", natsnames.ActRequest("edge-a", "r2")},
		{"a request to edge-b's collector", natsnames.ActRequest("edge-b", "r2")},
		{"an answer for edge-b", natsnames.ActResponse("edge-b", "r1")},
	} {
		if err := f.a.Publish(tc.subject, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-f.denied:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("%s: %v", tc.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no permissions violation", tc.name)
		}
	}
	// What the hub and the collectors received by the time a marker
	// travelling the same routes arrived: nothing forged.
	if err := f.a.Publish(natsnames.ActResponse("edge-a", "marker"), []byte("marker")); err != nil {
		t.Fatal(err)
	}
	got("the hub", hubResp, "marker")
	if err := hub.Publish(natsnames.ActRequest("edge-b", "marker"), []byte("marker")); err != nil {
		t.Fatal(err)
	}
	got("edge-b's collector", bReq, "marker")
	none("edge-a's collector", aReq)
	none("the hub", hubResp)
}
