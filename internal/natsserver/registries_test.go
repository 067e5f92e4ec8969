package natsserver

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
)

// TestRegistryRepublishIsolation: the registries bucket's republish
// reaches every cluster's collector (and the hub) with the stream's
// sequence headers, and is read-only to a collector: edge-a's credential
// publishing on it is refused by the server and reaches no one, not the
// hub, not edge-b, not edge-a's own subscription.
func TestRegistryRepublishIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startIsolation(t, ctx)
	hub, err := nats.Connect(f.srv.ClientURL(), nats.UserInfo(HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	sub := func(nc *nats.Conn) chan *nats.Msg {
		t.Helper()
		ch := make(chan *nats.Msg, 16)
		if _, err := nc.ChanSubscribe(natsnames.RegistryUpdates, ch); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	subs := map[string]chan *nats.Msg{"edge-a": sub(f.a), "edge-b": sub(f.b), "the hub": sub(hub)}
	regs, err := f.hjs.KeyValue(ctx, natsnames.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	// got checks the next message each subscriber receives is the
	// republish of the registry put at seq (the key's previous at last).
	got := func(key, value string, seq, last uint64) {
		t.Helper()
		for name, ch := range subs {
			select {
			case m := <-ch:
				h := m.Header
				if m.Subject != natsnames.RegistryUpdate(key) || string(m.Data) != value ||
					h.Get(natsnames.RePublishSubject) != natsnames.KVSubject(natsnames.RegistryBucket, key) ||
					h.Get(natsnames.RePublishSequence) != strconv.FormatUint(seq, 10) ||
					h.Get(natsnames.RePublishLastSequence) != strconv.FormatUint(last, 10) {
					t.Errorf("%s received %s %q %v, want %s at %d after %d", name, m.Subject, m.Data, h, value, seq, last)
				}
			case <-ctx.Done():
				t.Fatalf("%s received nothing", name)
			}
		}
	}
	put := func(key, value string) uint64 {
		t.Helper()
		seq, err := regs.Put(ctx, key, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	s1 := put("pods", `{"v":1}`)
	got("pods", `{"v":1}`, s1, 0)
	s2 := put("pods", `{"v":2}`)
	got("pods", `{"v":2}`, s2, s1)

	// edge-a forging an update: refused, and delivered to no one.
	forged := nats.NewMsg(natsnames.RegistryUpdate("pods"))
	forged.Data = []byte(`{"forged":true}`)
	forged.Header.Set(natsnames.RePublishSequence, "999")
	forged.Header.Set(natsnames.RePublishLastSequence, strconv.FormatUint(s2, 10))
	if err := f.a.PublishMsg(forged); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("forged update: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("forged update: no permissions violation")
	}
	// The next message everyone receives is the hub's next change (each
	// connection's messages keep their order): nothing forged between.
	s3 := put("configmaps", `{"v":1}`)
	got("configmaps", `{"v":1}`, s3, 0)
}
