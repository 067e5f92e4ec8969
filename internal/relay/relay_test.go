package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
)

const cluster = "edge-a"

// pair is a client and a collector's server on one real NATS server, each
// with its own connection.
type pair struct {
	client *Client
	srvNC  *nats.Conn
	stop   func()
}

func startPair(t *testing.T, lim Limits, slim ServerLimits, h http.Handler) *pair {
	t.Helper()
	ns, hubNC, _ := natstest.Start(t, 0)
	srvNC, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srvNC.Close)
	p := &pair{client: NewClient(hubNC, lim), srvNC: srvNC}
	if h == nil {
		p.stop = func() {}
		return p
	}
	srv, err := NewServer(srvNC, cluster, h, slim, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	// The subscription is in place once a round trip on its connection
	// returned after Run subscribed: wait for the first request to work.
	p.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(p.stop)
	waitServing(t, p.client)
	return p
}

// waitServing sends a request until the server takes it.
func waitServing(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "ping"), Timeout: 5 * time.Second})
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never took a request: %v", err)
		}
	}
}

// echo answers with what it received.
func echo(w http.ResponseWriter, r *http.Request) {
	caller, _ := CallerFrom(r.Context())
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-URI", r.URL.RequestURI())
	w.Header().Set("X-Caller", caller.User+"|"+strings.Join(caller.Groups, ","))
	w.Header().Set("X-Type", r.Header.Get("Content-Type"))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

func TestRoundTrip(t *testing.T) {
	p := startPair(t, Limits{ChunkSize: 1 << 10, Window: 2, AcceptTimeout: 5 * time.Second},
		ServerLimits{ChunkSize: 1 << 10, Window: 2}, http.HandlerFunc(echo))
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"no body", nil},
		{"one chunk", []byte(`{"metadata":{"labels":{"a":"b"}}}`)},
		{"many chunks, window exceeded both ways", bytes.Repeat([]byte("0123456789abcdef"), 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != nil {
				body = bytes.NewReader(tc.body)
			}
			resp, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Body: body, Timeout: 10 * time.Second,
				Open: Open{Method: "PATCH", Target: podTarget("PATCH", "web"), Query: "fieldManager=kubectl",
					Header: http.Header{"Content-Type": {"application/merge-patch+json"}}, ContentLength: int64(len(tc.body)),
					Caller: Caller{User: "alice", Groups: []string{"dev", "ops"}}}})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"X-Method": "PATCH", "X-URI": "/api/v1/namespaces/default/pods/web?fieldManager=kubectl",
				"X-Caller": "alice|dev,ops", "X-Type": "application/merge-patch+json"}
			for k, v := range want {
				if resp.Header.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, resp.Header.Get(k), v)
				}
			}
			if resp.Status != http.StatusCreated || !bytes.Equal(got, tc.body) {
				t.Errorf("status %d, body of %d bytes, want 201 and %d bytes", resp.Status, len(got), len(tc.body))
			}
		})
	}
}

// TestFlowControl: a handler writing faster than the hub reads is held to
// the window: whenever the hub has read n chunks, at most n+Window chunks
// were written.
func TestFlowControl(t *testing.T) {
	const chunk, window, chunks = 512, 3, 64
	var written atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if short(r) == "/ping" {
			return
		}
		b := bytes.Repeat([]byte("x"), chunk)
		for range chunks {
			if _, err := w.Write(b); err != nil {
				return
			}
			written.Add(1)
		}
	})
	p := startPair(t, Limits{ChunkSize: chunk, Window: window}, ServerLimits{ChunkSize: chunk, Window: window}, h)
	resp, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "logs"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, chunk)
	for read := 0; ; read++ {
		if w := written.Load(); w > int64(read+window) {
			t.Fatalf("%d chunks written with %d read: the window is %d", w, read, window)
		}
		if _, err := io.ReadFull(resp.Body, buf); err == io.EOF {
			if read != chunks {
				t.Fatalf("read %d chunks, want %d", read, chunks)
			}
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

func TestFailures(t *testing.T) {
	block := make(chan struct{})
	started := make(chan struct{}, 4)
	cancelled := make(chan struct{}, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch short(r) {
		case "/ping":
		case "/block":
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				cancelled <- struct{}{}
			case <-block:
			}
		case "/big":
			for {
				if _, err := w.Write(make([]byte, 1024)); err != nil {
					return
				}
			}
		default:
			echo(w, r)
		}
	})
	lim := Limits{AcceptTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, MaxRequestBytes: 4 << 10,
		MaxResponseBytes: 64 << 10, PerCluster: 2}
	p := startPair(t, lim, ServerLimits{IdleTimeout: 2 * time.Second, MaxRequestBytes: 8 << 10}, h)
	defer close(block)
	do := func(ctx context.Context, path string, body []byte, timeout time.Duration) error {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		resp, err := p.client.Do(ctx, &Request{Cluster: cluster, Open: Open{Method: "POST", Target: podTarget("POST", strings.TrimPrefix(path, "/")), ContentLength: -1}, Body: r, Timeout: timeout})
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	t.Run("request body over the limit", func(t *testing.T) {
		if err := do(context.Background(), "/echo", make([]byte, 5<<10), 5*time.Second); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
	t.Run("answer over the limit", func(t *testing.T) {
		if err := do(context.Background(), "/big", nil, 5*time.Second); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		if err := do(context.Background(), "/block", nil, 300*time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
		<-started
		<-cancelled
	})
	t.Run("client goes away: the handler is cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- do(ctx, "/block", nil, time.Minute) }()
		<-started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		<-cancelled
	})
	t.Run("per-cluster bound", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 2)
		for range 2 {
			go func() { errc <- do(ctx, "/block", nil, time.Minute) }()
			<-started
		}
		if err := do(context.Background(), "/echo", nil, 5*time.Second); !errors.Is(err, ErrBusy) {
			t.Errorf("third request: got %v, want ErrBusy", err)
		}
		cancel()
		for range 2 {
			<-errc
			<-cancelled
		}
	})
	t.Run("no collector for the cluster", func(t *testing.T) {
		resp, err := p.client.Do(context.Background(), &Request{Cluster: "edge-b", Open: podOpen("GET", "x"), Timeout: 5 * time.Second})
		if !errors.Is(err, ErrNoCollector) {
			t.Fatalf("got %v %v, want ErrNoCollector", resp, err)
		}
	})
	t.Run("collector gone mid-request", func(t *testing.T) {
		errc := make(chan error, 1)
		start := time.Now()
		go func() { errc <- do(context.Background(), "/block", nil, time.Minute) }()
		<-started
		// The collector took the request (its first keep-alive is
		// out), then its connection dies.
		if err := p.srvNC.Flush(); err != nil {
			t.Fatal(err)
		}
		p.srvNC.Close()
		err := <-errc
		if !errors.Is(err, ErrCollectorGone) {
			t.Fatalf("got %v, want ErrCollectorGone", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("noticed after %s, want about the idle timeout (2 s)", d)
		}
		t.Log("collector gone noticed after", time.Since(start))
		<-cancelled
	})
}

func TestServerBound(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if short(r) == "/block" {
			started <- struct{}{}
			<-release
		}
	})
	p := startPair(t, Limits{}, ServerLimits{MaxConcurrent: 1}, h)
	errc := make(chan error, 1)
	go func() {
		resp, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "block"), Timeout: time.Minute})
		if err == nil {
			err = resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	_, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "x"), Timeout: 5 * time.Second})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "1 requests at once") {
		t.Errorf("got %v, want the collector's refusal", err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestKeepAliveFollowsHubIdle: a hub whose idle timeout is shorter than a
// third of the collector's keep-alive period still hears from a slow
// request in time (the collector keeps alive at a third of the hub's
// timeout, which the request carries), and the period never goes below
// minKeepAlive nor above the collector's own.
func TestKeepAliveFollowsHubIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  time.Duration
		idle int64
		want time.Duration
	}{
		{"no idle sent: the collector's own", 5 * time.Second, 0, 5 * time.Second},
		{"the default idle", 5 * time.Second, 15000, 5 * time.Second},
		{"a longer idle", 5 * time.Second, 60000, 5 * time.Second},
		{"a shorter idle", 5 * time.Second, 3000, time.Second},
		{"a tiny idle", 5 * time.Second, 30, minKeepAlive},
		{"a huge idle", 5 * time.Second, 1 << 62, 5 * time.Second},
	} {
		if got := keepAlive(tc.own, tc.idle); got != tc.want {
			t.Errorf("%s: keepAlive(%s, %d) = %s, want %s", tc.name, tc.own, tc.idle, got, tc.want)
		}
	}
	const idle = 600 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if short(r) == "/slow" {
			// A member slow to answer: several of the hub's idle
			// timeouts, well under the collector's own keep-alive period.
			select {
			case <-time.After(4 * idle):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	p := startPair(t, Limits{IdleTimeout: idle}, ServerLimits{}, h)
	resp, err := p.client.Do(context.Background(), &Request{Cluster: cluster, Open: podOpen("GET", "slow"), Timeout: time.Minute})
	if err != nil {
		t.Fatalf("a request slower than the hub's idle timeout: %v, want its answer (keep-alives a third of %s apart)", err, idle)
	}
	defer resp.Body.Close()
	if resp.Status != http.StatusOK {
		t.Errorf("status %d, want 200", resp.Status)
	}
}
