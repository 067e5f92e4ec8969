package connlimit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server serves h through a Limiter on loopback until the test ends.
func server(t *testing.T, lim Limits, h http.Handler, wt time.Duration) (*Limiter, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(lim)
	srv := &http.Server{Handler: l.Refuse(Deadlines(wt, h), nil), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: wt}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l.Listen(inner)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return l, inner.Addr().String()
}

// dialFrom connects from a loopback source address, so one test plays
// several clients.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get sends one keep-alive GET on c and reads the answer.
func get(t *testing.T, c net.Conn, br *bufio.Reader) (int, map[string]any) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, body
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

func TestCaps(t *testing.T) {
	cases := []struct {
		name string
		lim  Limits
		// clients: the source address of each connection, in order
		clients []string
		want    []int // status of each connection's first request
		reason  string
		mention string
	}{
		{"per client", Limits{Max: 10, PerClient: 2, PerClientFlag: "--max-connections-per-client"},
			[]string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.2"}, []int{200, 200, 200, 429}, "TooManyRequests", "--max-connections-per-client"},
		{"server", Limits{Max: 3, PerClient: 2, MaxFlag: "--max-connections"},
			[]string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, []int{200, 200, 200, 503}, "ServiceUnavailable", "--max-connections"},
		{"server before client", Limits{Max: 2, PerClient: 2, MaxFlag: "--max-connections"},
			[]string{"127.0.0.2", "127.0.0.2", "127.0.0.2"}, []int{200, 200, 503}, "ServiceUnavailable", "--max-connections"},
		{"no caps", Limits{}, []string{"127.0.0.2", "127.0.0.2", "127.0.0.2"}, []int{200, 200, 200}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, addr := server(t, tc.lim, ok, 0)
			var conns []net.Conn
			for i, src := range tc.clients {
				c := dialFrom(t, src, addr)
				conns = append(conns, c)
				code, body := get(t, c, bufio.NewReader(c))
				if code != tc.want[i] {
					t.Fatalf("connection %d from %s: %d %v, want %d", i, src, code, body, tc.want[i])
				}
				if code == 200 {
					continue
				}
				if body["kind"] != "Status" || body["reason"] != tc.reason || body["code"] != float64(code) || !strings.Contains(fmt.Sprint(body["message"]), tc.mention) {
					t.Fatalf("refusal %v, want a Status %s naming %s", body, tc.reason, tc.mention)
				}
				// Refused and closed: the server reads nothing more.
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
					t.Fatalf("refused connection still open: %d %v", n, err)
				}
			}
			// Closing an accepted connection gives its place back.
			_ = conns[0].Close()
			waitFor(t, func() bool { return l.Open() == countOK(tc.want)-1 })
			c := dialFrom(t, tc.clients[0], addr)
			if code, body := get(t, c, bufio.NewReader(c)); code != 200 {
				t.Fatalf("after a close: %d %v", code, body)
			}
		})
	}
}

func countOK(codes []int) (n int) {
	for _, c := range codes {
		if c == 200 {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !f(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A refused connection that never sends a request is closed after the
// linger; past MaxRefusing they are closed at once, unanswered.
func TestRefusedConnectionsAreBounded(t *testing.T) {
	cases := []struct {
		name        string
		silent      int // refused connections that send nothing
		maxRefusing int
		wantDropped uint64
	}{
		{"within the refusal budget", 2, 4, 0},
		{"past it", 6, 4, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const linger = 300 * time.Millisecond
			l, addr := server(t, Limits{Max: 1, MaxRefusing: tc.maxRefusing, Linger: linger}, ok, 0)
			held := dialFrom(t, "127.0.0.2", addr)
			if code, _ := get(t, held, bufio.NewReader(held)); code != 200 {
				t.Fatalf("first connection: %d", code)
			}
			start := time.Now()
			var silent []net.Conn
			for range tc.silent {
				silent = append(silent, dialFrom(t, "127.0.0.3", addr))
			}
			for i, c := range silent {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err := c.Read(make([]byte, 1))
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("refused connection %d not closed within 5s", i)
				}
			}
			if took := time.Since(start); took > linger+2*time.Second {
				t.Errorf("refused connections closed after %s, linger %s", took, linger)
			}
			r := l.Refusals()
			if r.Dropped != tc.wantDropped || r.Server != uint64(tc.silent) {
				t.Errorf("refusals %+v, want %d server refusals, %d dropped", r, tc.silent, tc.wantDropped)
			}
			waitFor(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.refusing) == 0 })
		})
	}
}

// The write timeout bounds each write, not the answer: a stream longer
// than it keeps going, and a client that stops reading is cut.
func TestDeadlines(t *testing.T) {
	const wt = 300 * time.Millisecond
	cases := []struct {
		name    string
		read    bool
		wantErr bool
	}{
		{"a reading client streams past the write timeout", true, false},
		{"a client that stops reading is cut", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			result := make(chan error, 1)
			chunk := strings.Repeat("x", 64<<10)
			_, addr := server(t, Limits{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for i := 0; ; i++ {
					if _, err := io.WriteString(w, chunk); err != nil {
						result <- err
						return
					}
					http.NewResponseController(w).Flush()
					if tc.read && i >= 12 {
						result <- nil
						return
					}
					if tc.read {
						time.Sleep(wt / 3) // a slow stream, 4 writes per timeout
					}
				}
			}), wt)
			c := dialFrom(t, "127.0.0.2", addr)
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if tc.read {
				go func() { _, _ = io.Copy(io.Discard, c) }()
			}
			select {
			case err := <-result:
				if (err != nil) != tc.wantErr {
					t.Fatalf("handler ended with %v after %s, want error %v", err, time.Since(start), tc.wantErr)
				}
				if tc.read && time.Since(start) < 3*wt {
					t.Fatalf("the stream lasted %s, not past the write timeout %s", time.Since(start), wt)
				}
				if !tc.read && time.Since(start) > wt+3*time.Second {
					t.Fatalf("a stuck client was cut after %s, write timeout %s", time.Since(start), wt)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("handler still running after 10s")
			}
			_ = c.Close()
		})
	}
}
