package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/query"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/rest"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

func TestPageLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		max, asked int64
		want       int64
	}{
		{"no cap, no limit: everything", 0, 0, 0},
		{"no cap keeps the client's limit", 0, 70000, 70000},
		{"no limit asked: one capped page", 10000, 0, 10000},
		{"a larger limit is capped", 10000, 150000, 10000},
		{"a smaller limit is kept", 10000, 500, 500},
		{"the cap itself", 10000, 10000, 10000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Limits{MaxListObjects: tc.max}).pageLimit(tc.asked); got != tc.want {
				t.Fatalf("pageLimit(%d) with cap %d = %d, want %d", tc.asked, tc.max, got, tc.want)
			}
		})
	}
}

// TestListAndSearchAreCapped: the service hands the capped limit and the
// caller's identity to the backend.
func TestListAndSearchAreCapped(t *testing.T) {
	fr, fs := &fakeReader{}, &fakeSearcher{}
	q := &queryService{reader: fr, searcher: fs, sealer: query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), versions: newVersionBook(nil, query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), 0, 0), limits: Limits{MaxListObjects: 100}}
	ctx := auth.WithUser(context.Background(), auth.User{Name: "alice"})
	for _, tc := range []struct {
		asked, want int64
	}{{0, 100}, {1000, 100}, {7, 7}} {
		if _, err := q.list(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: tc.asked}); err != nil {
			t.Fatal(err)
		}
		if fr.got.Limit != tc.want || fr.got.Client != "user alice" {
			t.Errorf("list limit %d: backend got limit %d client %q, want %d and user alice", tc.asked, fr.got.Limit, fr.got.Client, tc.want)
		}
		if _, err := q.search(ctx, &fleetviewv1.SearchRequest{Text: "x", Limit: tc.asked}); err != nil {
			t.Fatal(err)
		}
		if fs.got.Limit != tc.want || fs.got.Client != "user alice" {
			t.Errorf("search limit %d: backend got limit %d client %q, want %d and user alice", tc.asked, fs.got.Limit, fs.got.Client, tc.want)
		}
	}
}

func TestClientOf(t *testing.T) {
	withPeerAddr := func(a net.Addr) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"authenticated subject wins", auth.WithUser(withPeerAddr(httpAddr("10.0.0.1:5555")), auth.User{Name: "bob"}), "user bob"},
		{"gRPC peer: host only, every connection of a host is one client", withPeerAddr(&net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 40000}), "address 10.0.0.2"},
		{"HTTP client", withPeerAddr(httpAddr("[::1]:7000")), "address ::1"},
		{"nothing known", context.Background(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientOf(tc.ctx); got != tc.want {
				t.Fatalf("clientOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestWithPeer: REST and Kubernetes calls made in-process know their
// HTTP client.
func TestWithPeer(t *testing.T) {
	var got string
	h := withPeer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = clientOf(r.Context()) }))
	r := httptest.NewRequest(http.MethodGet, "/v1/watch/core/v1/pods", nil)
	r.RemoteAddr = "192.0.2.7:31337"
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got != "address 192.0.2.7" {
		t.Fatalf("client %q", got)
	}
}

func TestLimitBody(t *testing.T) {
	const max = 64
	for _, tc := range []struct {
		name          string
		body          string
		contentLength int64 // -1: unknown (chunked)
		wantCode      int
		// slow: the body stops at the server's read deadline after body
		slow bool
	}{
		{"no body", "", 0, http.StatusOK, false},
		{"small body", `{"registry":{}}`, 15, http.StatusOK, false},
		{"exactly the limit", strings.Repeat("x", max), max, http.StatusOK, false},
		{"declared too large: refused unread", strings.Repeat("x", 1000), 1000, http.StatusRequestEntityTooLarge, false},
		{"chunked and too large: refused after max+1 bytes", strings.Repeat("x", 1000), -1, http.StatusRequestEntityTooLarge, false},
		{"too slow: 408 at the read deadline", `{"regis`, 15, http.StatusRequestTimeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var read string
			h := limitBody(max, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				b := make([]byte, 2*max)
				n, _ := r.Body.Read(b)
				read = string(b[:n])
			}))
			r := httptest.NewRequest(http.MethodPost, "/v1/registries", strings.NewReader(tc.body))
			r.ContentLength = tc.contentLength
			if tc.body == "" {
				r.Body = http.NoBody
			}
			if tc.slow {
				r.Body = io.NopCloser(io.MultiReader(strings.NewReader(tc.body), iotest.ErrReader(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", w.Code, tc.wantCode, w.Body)
			}
			if tc.wantCode == http.StatusOK {
				if read != tc.body {
					t.Fatalf("handler read %q, want the whole body", read)
				}
				return
			}
			var st rest.Status
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
			reason := map[int]string{http.StatusRequestEntityTooLarge: "RequestEntityTooLarge", http.StatusRequestTimeout: "RequestTimeout"}[tc.wantCode]
			if st.Kind != "Status" || st.Reason != reason || st.Code != tc.wantCode {
				t.Fatalf("status %+v", st)
			}
			// The rest of the body is unread: the connection must not be reused.
			if w.Header().Get("Connection") != "close" {
				t.Fatalf("refused without Connection: close")
			}
		})
	}
}

func TestWatchLimiter(t *testing.T) {
	type step struct {
		client  string
		release int // >0: release the n-th granted watch (1-based) instead of acquiring
		ok      bool
	}
	for _, tc := range []struct {
		name           string
		max, perClient int
		steps          []step
	}{
		{"no caps", 0, 0, []step{{"a", 0, true}, {"a", 0, true}, {"a", 0, true}}},
		{"per client", 0, 2, []step{{"a", 0, true}, {"a", 0, true}, {"a", 0, false}, {"b", 0, true}, {"", 1, true}, {"a", 0, true}}},
		{"global", 2, 0, []step{{"a", 0, true}, {"b", 0, true}, {"c", 0, false}, {"", 2, true}, {"c", 0, true}}},
		{"released twice counts once", 2, 1, []step{{"a", 0, true}, {"", 1, true}, {"", 1, true}, {"b", 0, true}, {"c", 0, true}, {"d", 0, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newWatchLimiter(tc.max, tc.perClient)
			var granted []func()
			for i, s := range tc.steps {
				if s.release > 0 {
					granted[s.release-1]()
					continue
				}
				rel, err := l.acquire(s.client)
				if s.ok != (err == nil) {
					t.Fatalf("step %d (%s): err %v, want ok=%v", i, s.client, err, s.ok)
				}
				if err != nil {
					if !errors.Is(err, query.ErrTooManyRequests) {
						t.Fatalf("step %d: %v is not ErrTooManyRequests", i, err)
					}
					continue
				}
				granted = append(granted, rel)
			}
		})
	}
}

// emptyReader holds nothing: a watch's initial list is one empty page.
type emptyReader struct{}

func (emptyReader) Get(context.Context, query.GetOptions) (query.Object, error) {
	return query.Object{}, query.ErrNotFound
}
func (emptyReader) List(context.Context, query.ListOptions) (query.Page, error) {
	return query.Page{Version: query.Version{}}, nil
}
func (emptyReader) Versions(context.Context) (query.Version, error) { return query.Version{}, nil }

// TestWatchQuotaIsReleased: a client at its watch limit is refused with
// 429, and gets a watch again once one of its watches has ended.
func TestWatchQuotaIsReleased(t *testing.T) {
	q := &queryService{reader: emptyReader{}, hub: watchhub.New(watchhub.Options{}), sealer: query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), versions: newVersionBook(nil, query.NewSealer([]byte("0123456789abcdef0123456789abcdef")), 0, 0),
		watchBuffer: 16, bookmarkInterval: time.Hour, stopping: make(chan struct{}), watches: newWatchLimiter(0, 2)}
	alice := auth.WithUser(context.Background(), auth.User{Name: "alice"})
	req := &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods"}
	send := func(*fleetviewv1.WatchEvent) error { return nil }
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func() running {
		ctx, cancel := context.WithCancel(alice)
		r := running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- q.watch(ctx, req, send) }()
		return r
	}
	waitOpen := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, n := q.watches.open("user alice"); n == want {
				return
			}
			if time.Now().After(deadline) {
				_, n := q.watches.open("user alice")
				t.Fatalf("alice holds %d watches, want %d", n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	w1, w2 := start(), start()
	waitOpen(2)
	err := q.watch(alice, req, send)
	if !errors.Is(err, query.ErrTooManyRequests) {
		t.Fatalf("third watch: %v, want ErrTooManyRequests", err)
	}
	if code, st := rest.StatusBody(apierr.ToStatus(err)); code != http.StatusTooManyRequests || st.Reason != "TooManyRequests" {
		t.Fatalf("refusal shows as %d %s", code, st.Reason)
	}
	// Another client is not affected by alice's quota.
	bctx, bcancel := context.WithCancel(auth.WithUser(context.Background(), auth.User{Name: "bob"}))
	bdone := make(chan error, 1)
	go func() { bdone <- q.watch(bctx, req, send) }()
	w1.cancel()
	<-w1.done
	waitOpen(1)
	w3 := start()
	waitOpen(2)
	for _, r := range []running{w2, w3} {
		r.cancel()
		<-r.done
	}
	bcancel()
	<-bdone
	if total, _ := q.watches.open(""); total != 0 {
		t.Fatalf("%d watches still counted after every watch ended", total)
	}
}

// TestLimitsDefaults: the limits that are never off get their defaults;
// the caps stay off unless set.
func TestLimitsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Limits
		want Limits
	}{
		{"zero", Limits{}, Limits{MaxRequestBytes: DefaultMaxRequestBytes, KeepaliveMinTime: DefaultKeepaliveMinTime,
			KeepaliveTime: DefaultKeepaliveTime, KeepaliveTimeout: DefaultKeepaliveTimeout, HTTPReadHeaderTimeout: DefaultReadHeaderTimeout}},
		{"set values are kept", Limits{MaxListObjects: 5, MaxWatches: 6, MaxWatchesPerClient: 7, MaxRequestBytes: 8, MaxConcurrentStreams: 9,
			KeepaliveMinTime: time.Second, KeepaliveTime: 2 * time.Second, KeepaliveTimeout: 3 * time.Second, HTTPReadHeaderTimeout: 4 * time.Second},
			Limits{MaxListObjects: 5, MaxWatches: 6, MaxWatchesPerClient: 7, MaxRequestBytes: 8, MaxConcurrentStreams: 9,
				KeepaliveMinTime: time.Second, KeepaliveTime: 2 * time.Second, KeepaliveTimeout: 3 * time.Second, HTTPReadHeaderTimeout: 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			got.setDefaults()
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if n := len(got.grpcOptions()); n < 3 {
				t.Fatalf("%d gRPC options: message size and keepalive are always enforced", n)
			}
		})
	}
}
