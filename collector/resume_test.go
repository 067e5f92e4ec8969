package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetview/fleetview/internal/stream"
)

// watchMember is a member apiserver's watch of configmaps per namespace: a
// log of events with increasing resourceVersions, replayed after the
// requested one (those of the request's namespace) and then streamed as
// they are added. A resourceVersion below compacted is
// answered 410 Gone, as an apiserver answers one past its watch window.
type watchMember struct {
	mu        sync.Mutex
	events    []memberEvent
	compacted int
	changed   chan struct{}
	// from is "namespace:resourceVersion" of each watch request, in order.
	from []string
}

type memberEvent struct {
	typ, ns, uid, name string
	rv                 int
}

func newWatchMember() *watchMember { return &watchMember{changed: make(chan struct{})} }

// add appends an event at the next resourceVersion and returns it.
func (m *watchMember) add(typ, ns, uid, name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	rv := 1
	if n := len(m.events); n > 0 {
		rv = m.events[n-1].rv + 1
	}
	m.events = append(m.events, memberEvent{typ, ns, uid, name, rv})
	close(m.changed)
	m.changed = make(chan struct{})
	return rv
}

func (m *watchMember) compact() {
	m.mu.Lock()
	m.compacted = m.events[len(m.events)-1].rv
	m.mu.Unlock()
}

func (m *watchMember) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.from)
}

func (m *watchMember) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	from, err := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	if err != nil || r.URL.Query().Get("watch") != "true" {
		http.Error(w, "a watch with a resourceVersion only", http.StatusBadRequest)
		return
	}
	ns, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/")
	m.mu.Lock()
	m.from = append(m.from, ns+":"+strconv.Itoa(from))
	gone := from < m.compacted
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if gone {
		w.WriteHeader(http.StatusGone)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: %d","reason":"Expired","code":410}`, from)
		return
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	next := from
	for {
		m.mu.Lock()
		var out []memberEvent
		for _, e := range m.events {
			if e.rv > next && e.ns == ns {
				out = append(out, e)
			}
		}
		changed := m.changed
		m.mu.Unlock()
		for _, e := range out {
			fmt.Fprintf(w, `{"type":%q,"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"uid":%q,"namespace":%q,"name":%q,"resourceVersion":"%d"}}}`+"\n", e.typ, e.uid, e.ns, e.name, e.rv)
			next = e.rv
		}
		w.(http.Flusher).Flush()
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// storedSeq is "TYPE rv" of every message the stream holds for uid, in
// stream order.
func storedSeq(ctx context.Context, st jetstream.Stream, gvrUID string) []string {
	info, err := st.Info(ctx)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		if m.Subject == gvrUID {
			out = append(out, strings.TrimPrefix(m.Header.Get(stream.HdrType), "EVENT_TYPE_")+" "+m.Header.Get(stream.HdrRV))
		}
	}
	return out
}

// TestWatchResumesFromAcknowledged: the member's changes made while the
// collector's NATS is down reach the stream each as its own message, in
// the member's order and once, whether the publishes waited in the
// reconnect buffer and timed out or failed at once past its bound: the
// watch of each namespace scope resumes from its own last acknowledged
// resourceVersion once NATS is back, and the versions the buffer delivered
// are not published again. A resume the member answers 410 Gone relists,
// counted.
func TestWatchResumesFromAcknowledged(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name string
		// buffer is the connection's reconnect buffer: 1 byte makes every
		// publish of the outage fail at once.
		buffer int
		// expire compacts the member's log past the acknowledged
		// resourceVersion while NATS is down.
		expire bool
	}{
		{"publishes held in the reconnect buffer time out", 1 << 20, false},
		{"publishes past the reconnect buffer fail at once", 1, false},
		{"the acknowledged resourceVersion left the watch window", 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			srv := startJS(t, -1, dir)
			_, p, err := net.SplitHostPort(srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(tc.buffer))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()

			member := newWatchMember()
			hs := httptest.NewServer(member)
			defer hs.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			rc := &rest.Config{Host: hs.URL, Transport: tr}
			c, err := New(Config{Cluster: "m1", REST: rc, NATS: nc, PublishAckTimeout: 300 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			st, _, err := stream.EnsureStream(ctx, c.js, "m1", 1, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			// Two namespace scopes, a watch each: web in a, gone in b.
			s := newResourceSync(resourceSyncConfig{cluster: "m1", w: want{gvr: configMapsGVR, kind: "ConfigMap", namespaced: true, namespaces: []string{"a", "b"}},
				raw: cs.CoreV1().RESTClient(), js: c.js, pub: c, log: c.log, ttl: stream.DefaultTombstoneTTL, m: c.m})
			c.running[configMapsGVR] = &runningSync{rs: s}

			// What the member did before the outage, published and
			// acknowledged.
			var web []string
			add := func(typ, uid, name string) {
				ns := map[string]string{"u1": "a", "u2": "b"}[uid]
				rv := member.add(typ, ns, uid, name)
				if uid == "u1" {
					web = append(web, map[string]string{"ADDED": "UPSERT", "MODIFIED": "UPSERT", "DELETED": "DELETE"}[typ]+" "+strconv.Itoa(rv))
				}
			}
			add("ADDED", "u1", "web")
			add("ADDED", "u2", "gone")
			add("MODIFIED", "u1", "web")
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 2)
			for _, ns := range s.scopes() {
				go func() { done <- s.watchScope(wctx, ns, "0") }()
			}
			ended := 0
			defer func() {
				cancel()
				for ; ended < 2; ended++ {
					<-done
				}
			}()
			u1 := stream.ObjectSubject("m1", configMapsGVR, "u1")
			eventually(t, "the changes before the outage stored", func() bool {
				return slices.Equal(storedSeq(ctx, st, u1), web)
			})
			// Each scope's last acknowledged resourceVersion: web's
			// modification in a, gone's creation in b.
			acked := []string{"a:3", "b:2"}

			srv.Shutdown()
			srv.WaitForShutdown()
			eventually(t, "the client sees the server gone", func() bool { return !nc.IsConnected() })
			// Half the changes while the watch still publishes, the rest
			// after a publish failed (the watch stopped until NATS is back).
			for i := range 3 {
				add("MODIFIED", "u1", "web")
				if i == 0 {
					eventually(t, "a publish failed", func() bool { return c.m.publishErrors.Load() > 0 })
				}
			}
			add("DELETED", "u2", "gone")
			add("MODIFIED", "u1", "web")
			if tc.expire {
				member.compact()
			}
			srv = startJS(t, port, dir)
			defer func() { srv.Shutdown(); srv.WaitForShutdown() }()

			if tc.expire {
				// Both scopes published in the outage, and both resume
				// points left the window.
				for ; ended < 2; ended++ {
					select {
					case err := <-done:
						if !errors.Is(err, errRelist) {
							t.Fatalf("watch ended with %v, want a relist", err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the expired resume did not relist")
					}
				}
				if n := c.m.resumeExpired.Load(); n != 2 {
					t.Fatalf("resume_expired %d, want 2", n)
				}
				return
			}
			eventually(t, "every change of web stored", func() bool {
				got := storedSeq(ctx, st, u1)
				return len(got) > 0 && got[len(got)-1] == web[len(web)-1]
			})
			if got := storedSeq(ctx, st, u1); !slices.Equal(got, web) {
				t.Fatalf("stream holds %v for web, want the member's sequence %v", got, web)
			}
			u2 := storedSeq(ctx, st, stream.ObjectSubject("m1", configMapsGVR, "u2"))
			eventually(t, "gone's delete stored", func() bool {
				u2 = storedSeq(ctx, st, stream.ObjectSubject("m1", configMapsGVR, "u2"))
				return len(u2) == 2
			})
			if want := []string{"UPSERT 2", "DELETE 7"}; !slices.Equal(u2, want) {
				t.Fatalf("stream holds %v for gone, want %v", u2, want)
			}
			// a resumed (its publish failed before the rest of the
			// outage's changes); b did if its delete failed rather than
			// being acknowledged from the buffer, which a one-byte buffer
			// cannot hold. Every resume is from the scope's acknowledged
			// resourceVersion (the member never ends a watch here).
			reqs := member.requests()
			for _, r := range reqs {
				if !strings.HasSuffix(r, ":0") && !slices.Contains(acked, r) {
					t.Fatalf("watch requests %v: %s is not from an acknowledged resourceVersion %v", reqs, r, acked)
				}
			}
			mustResume := acked[:1]
			if tc.buffer == 1 {
				mustResume = acked
			}
			for _, a := range mustResume {
				if !slices.Contains(reqs, a) {
					t.Fatalf("watch requests %v, none from the acknowledged resourceVersion %s", reqs, a)
				}
			}
			if n := c.m.resumes.Load(); n < int64(len(mustResume)) {
				t.Fatalf("resumes %d, want at least %d", n, len(mustResume))
			}
			if n := c.m.resumeExpired.Load() + c.m.relists.Load(); n != 0 {
				t.Fatalf("%d relists, want none", n)
			}
		})
	}
}

// TestAckTrack: the resume point moves over an event only once it and
// every event before it were acknowledged (a bookmark or an unchanged
// object publishes nothing and waits its turn); a failure stops it and
// ends the watch; a late outcome from before a resume changes nothing.
func TestAckTrack(t *testing.T) {
	msg := func(uid, rv string) *nats.Msg {
		m := nats.NewMsg(stream.ObjectSubject("m1", configMapsGVR, uid))
		m.Header.Set(stream.HdrType, upsertType)
		m.Header.Set(stream.HdrRV, rv)
		return m
	}
	type step struct {
		do    string // begin (rv), pub, ack, fail (entry i), finish
		i     int
		rv    string
		acked string
	}
	cases := []struct {
		name      string
		steps     []step
		cancelled bool
	}{
		{"in order", []step{{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"finish", 0, "", "1"}, {"ack", 0, "", "2"}}, false},
		{"acknowledged out of order", []step{
			{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"finish", 0, "", "1"},
			{"begin", 1, "3", "1"}, {"pub", 1, "", "1"}, {"finish", 1, "", "1"},
			{"ack", 1, "", "1"}, {"ack", 0, "", "3"}}, false},
		{"a bookmark waits for the publishes before it", []step{
			{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"finish", 0, "", "1"},
			{"begin", 1, "9", "1"}, {"finish", 1, "", "1"},
			{"ack", 0, "", "9"}}, false},
		{"an open event is not acknowledged", []step{
			{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"ack", 0, "", "1"}, {"finish", 0, "", "2"}}, false},
		{"two publishes of one event", []step{
			{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"pub", 0, "", "1"}, {"finish", 0, "", "1"},
			{"ack", 0, "", "1"}, {"ack", 0, "", "2"}}, false},
		{"a failure stops the resume point", []step{
			{"begin", 0, "2", "1"}, {"pub", 0, "", "1"}, {"finish", 0, "", "1"},
			{"begin", 1, "3", "1"}, {"pub", 1, "", "1"}, {"finish", 1, "", "1"},
			{"fail", 0, "", "1"}, {"ack", 1, "", "1"}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newAckTrack("1")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			tr.setCancel(cancel)
			var es []*ackEntry
			for k, st := range tc.steps {
				switch st.do {
				case "begin":
					es = append(es, tr.begin("u", st.rv))
				case "pub":
					es[st.i].add(msg("u", es[st.i].rv))
				case "ack":
					es[st.i].resolve(true)
				case "fail":
					es[st.i].resolve(false)
				case "finish":
					es[st.i].finish()
				}
				if got := tr.ackedRV(); got != st.acked {
					t.Fatalf("step %d (%s %d): acknowledged %q, want %q", k, st.do, st.i, got, st.acked)
				}
			}
			if got := errors.Is(context.Cause(ctx), errResume); got != tc.cancelled {
				t.Fatalf("watch ended %v, want %v", got, tc.cancelled)
			}
			if !tc.cancelled {
				return
			}
			// A resume drops what was in flight; its late outcome is ignored.
			if rv := tr.rebase(); rv != "1" {
				t.Fatalf("resumed from %q, want 1", rv)
			}
			es[1].resolve(true)
			if got := tr.ackedRV(); got != "1" {
				t.Fatalf("a late acknowledgement moved the resume point to %q", got)
			}
		})
	}
}

// TestReplayed: after a resume, a replayed version is skipped when the
// stream holds it or a later version published in the same window (a
// version lost in flight while a later one was stored cannot be put back
// in its place), and published otherwise.
func TestReplayed(t *testing.T) {
	cases := []struct {
		name      string
		published []string // the versions of u1 published after the resume point
		stored    string   // what the stream's last message of u1 is ("": none)
		replay    []string
		skipped   []string
	}{
		{"none stored", []string{"3", "4"}, "", []string{"3", "4", "5"}, nil},
		{"only older stored", []string{"3", "4"}, "2", []string{"3", "4", "5"}, nil},
		{"all stored from the buffer", []string{"3", "4"}, "4", []string{"3", "4", "5"}, []string{"3", "4"}},
		{"the first lost in flight, the second stored", []string{"3", "4", "5"}, "4", []string{"3", "4", "5", "6"}, []string{"3", "4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newAckTrack("2")
			e := tr.begin("u1", tc.published[0])
			for _, rv := range tc.published {
				m := nats.NewMsg(stream.ObjectSubject("m1", configMapsGVR, "u1"))
				m.Header.Set(stream.HdrType, upsertType)
				m.Header.Set(stream.HdrRV, rv)
				e.add(m)
			}
			tr.rebase()
			asked := 0
			stored := func(_ context.Context, uid string) (string, string, bool, error) {
				asked++
				if uid != "u1" {
					t.Fatalf("asked for %s", uid)
				}
				return upsertType, tc.stored, tc.stored != "", nil
			}
			var skipped []string
			for _, rv := range tc.replay {
				skip, err := tr.replayed(context.Background(), "u1", upsertType, rv, stored)
				if err != nil {
					t.Fatal(err)
				}
				if skip {
					skipped = append(skipped, rv)
				}
			}
			if !slices.Equal(skipped, tc.skipped) {
				t.Fatalf("skipped %v, want %v", skipped, tc.skipped)
			}
			if asked != 1 {
				t.Fatalf("the stream was asked %d times, want once", asked)
			}
			if skip, _ := tr.replayed(context.Background(), "u2", upsertType, "9", stored); skip || asked != 1 {
				t.Fatal("an object not in doubt was skipped or looked up")
			}
		})
	}
}

// BenchmarkAckTracking is what the acknowledgement tracking of a watch
// adds per publish, beside the baseline callback (the pacer's alone):
// a list's acknowledgement pays a miss in Collector.inflight, a watch
// event its entry, its context and the map's store and delete.
func BenchmarkAckTracking(b *testing.B) {
	c := &Collector{pacer: newPacer(pacerTarget, minPublishWindow, publishWindow, time.Second, func() int { return 0 })}
	msg := nats.NewMsg(stream.ObjectSubject("m1", configMapsGVR, "u1"))
	msg.Header.Set(stream.HdrType, upsertType)
	msg.Header.Set(stream.HdrRV, "5")
	b.Run("ack baseline", func(b *testing.B) {
		for b.Loop() {
			c.pacer.done(msg, false)
		}
	})
	b.Run("ack of a list publish", func(b *testing.B) {
		for b.Loop() {
			c.pacer.done(msg, false)
			if e, ok := c.inflight.LoadAndDelete(msg); ok {
				e.(*ackEntry).resolve(true)
			}
		}
	})
	b.Run("watch event tracked and acknowledged", func(b *testing.B) {
		t := newAckTrack("1")
		ctx := context.Background()
		for b.Loop() {
			e := t.begin("u1", "5")
			if ackEntryFrom(withAckEntry(ctx, e)) != e {
				b.Fatal("entry lost")
			}
			e.add(msg)
			c.inflight.Store(msg, e)
			c.pacer.done(msg, false)
			if v, ok := c.inflight.LoadAndDelete(msg); ok {
				v.(*ackEntry).resolve(true)
			}
			e.finish()
		}
	})
}
