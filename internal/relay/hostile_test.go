package relay

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

// TestHostileCollector: a collector runs in its member cluster, so what
// it sends is untrusted. Frames out of order, lost, beyond the window,
// malformed or never ending fail the one request with an error, never a
// hang or a panic.
func TestHostileCollector(t *testing.T) {
	head := func(subj string) *nats.Msg { m, _ := jsonFrame(subj, kindHead, head{Status: 200}); return m }
	data := func(subj string, seq int) *nats.Msg { return frame(subj, kindData, seq, []byte("x")) }
	for _, tc := range []struct {
		name   string
		frames func(subj string) []*nats.Msg
		want   error
	}{
		{"a lost chunk", func(s string) []*nats.Msg { return []*nats.Msg{head(s), data(s, 1), data(s, 3)} }, ErrProtocol},
		{"a chunk without a number", func(s string) []*nats.Msg { return []*nats.Msg{head(s), frame(s, kindData, -1, []byte("x"))} }, ErrProtocol},
		{"an end before its chunks", func(s string) []*nats.Msg { return []*nats.Msg{head(s), data(s, 1), frame(s, kindEnd, 5, nil)} }, ErrProtocol},
		{"a malformed head", func(s string) []*nats.Msg { return []*nats.Msg{frame(s, kindHead, -1, []byte("{"))} }, ErrProtocol},
		{"a head with no status", func(s string) []*nats.Msg { return []*nats.Msg{frame(s, kindHead, -1, []byte(`{"status":7}`))} }, ErrProtocol},
		{"data before the head", func(s string) []*nats.Msg { return []*nats.Msg{data(s, 1)} }, ErrProtocol},
		{"an unknown frame", func(s string) []*nats.Msg { return []*nats.Msg{head(s), frame(s, "surprise", -1, nil)} }, ErrProtocol},
		{"a flood past the window", func(s string) []*nats.Msg {
			ms := []*nats.Msg{head(s)}
			for i := 1; i <= 200; i++ {
				ms = append(ms, data(s, i))
			}
			return ms
		}, ErrProtocol},
		{"a head, then silence", func(s string) []*nats.Msg { return []*nats.Msg{head(s)} }, ErrCollectorGone},
		{"a keep-alive, then silence", func(s string) []*nats.Msg { return []*nats.Msg{frame(s, kindKeep, -1, nil)} }, ErrCollectorGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, hubNC, _ := natstest.Start(t, 0)
			evil, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer evil.Close()
			// The hostile collector answers the first frame of each
			// request with its scripted frames.
			sub, err := evil.Subscribe(natsnames.ActRequests(cluster), func(m *nats.Msg) {
				if frameKind(m) != kindOpen {
					return
				}
				id, _ := requestID(cluster, m.Subject)
				for _, f := range tc.frames(natsnames.ActResponse(cluster, id)) {
					_ = evil.PublishMsg(f)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := evil.Flush(); err != nil {
				t.Fatal(err)
			}
			c := NewClient(hubNC, Limits{Window: 4, AcceptTimeout: 2 * time.Second, IdleTimeout: 300 * time.Millisecond})
			start := time.Now()
			resp, err := c.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "x"), Timeout: time.Second})
			if err == nil {
				// Read slowly enough that a flood overflows the queue.
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}
