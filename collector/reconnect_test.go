package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// startJS starts a JetStream server on port (-1: any) with its store in dir.
func startJS(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

// eventually waits up to 10 s for cond, polling.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

func relistAsked(s *resourceSync) bool {
	select {
	case <-s.relist:
		return true
	default:
		return false
	}
}

// TestRelistWaitsForReconnect: while NATS is down (its server killed and
// restarted on the same store, as a hub embedding it is), the collector's
// publishes wait in the connection's reconnect buffer, in order and up to
// its bound, and an acknowledgement timeout does not relist until the
// connection is back; then the buffer reaches the stream first, in order,
// and the relist is asked for. Past the bound a publish fails at once.
// Other publish failures relist at once. This is a list's publish (no
// watch event): a watch's resumes instead (TestWatchResumesFromAcknowledged).
func TestRelistWaitsForReconnect(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	srv := startJS(t, -1, dir)
	_, p, err := net.SplitHostPort(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	portNum, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	const bound = 4 << 10
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(bound))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	s, _ := newTestSync(gvr, false)
	c := &Collector{cfg: Config{NATS: nc}, running: map[schema.GroupVersionResource]*runningSync{gvr: {rs: s}}}
	s.pub = c
	timeout := jetstream.ErrAsyncPublishTimeout
	hdr := nats.Header{}
	hdr.Set(stream.HdrType, fleetviewv1.EventType_EVENT_TYPE_UPSERT.String())

	// Connected: a timeout relists at once.
	s.publishFailed("u1", hdr, timeout, nil)
	if !relistAsked(s) {
		t.Fatal("a timeout while connected did not relist")
	}

	rctx, cancel := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() { _ = c.relistOnReconnect(rctx); close(loopDone) }()
	defer func() { cancel(); <-loopDone }()

	srv.Shutdown()
	srv.WaitForShutdown()
	eventually(t, "the client sees the server gone", func() bool { return !nc.IsConnected() })
	for _, tc := range []struct {
		name   string
		err    error
		relist bool
	}{
		{"timeout while down waits", timeout, false},
		{"another failure relists", errors.New("nats: no responders available for request"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.publishFailed("u1", hdr, tc.err, nil)
			if got := relistAsked(s); got != tc.relist {
				t.Fatalf("relist asked %v, want %v", got, tc.relist)
			}
		})
	}
	if !s.relistOnReconnect.Load() {
		t.Fatal("the resource does not wait for the reconnection")
	}
	// The outage's changes, buffered in order up to the bound.
	var sent int
	for ; ; sent++ {
		if err := nc.Publish(fmt.Sprintf("t.%d", sent), make([]byte, 256)); err != nil {
			if !errors.Is(err, nats.ErrReconnectBufExceeded) {
				t.Fatalf("publish %d: %v", sent, err)
			}
			break
		}
	}
	if sent == 0 || sent*256 > bound {
		t.Fatalf("%d publishes of 256 bytes buffered within %d bytes", sent, bound)
	}
	if relistAsked(s) {
		t.Fatal("relisted while NATS is down")
	}

	srv = startJS(t, portNum, dir)
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	eventually(t, "a relist after the reconnection", func() bool { return relistAsked(s) })
	if s.relistOnReconnect.Load() || c.awaiting.Load() {
		t.Fatal("still waiting after the relist")
	}
	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the buffer stored", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(sent)
	})
	for i := range sent {
		m, err := st.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("message %d of %d buffered: %v", i+1, sent, err)
		}
		if want := fmt.Sprintf("t.%d", i); m.Subject != want {
			t.Fatalf("message %d is %s, want %s (the buffer's order)", i+1, m.Subject, want)
		}
	}
	if info, _ := st.Info(ctx); info.State.Msgs != uint64(sent) {
		t.Fatalf("stream holds %d messages, want the %d buffered", info.State.Msgs, sent)
	}
}
