package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relay"
)

// TestRelaySlots: each bound of the requests in flight, in the order a
// refusal names them, and every place given back when its request ends.
func TestRelaySlots(t *testing.T) {
	lim := RelayLimits{ClusterRequests: 6, ClusterStreams: 4, CallerRequests: 3, CallerStreams: 2}
	// A step takes a place (want: the limit refusing it, "" taken) or,
	// with give > 0, gives back the give-th place taken (1-based).
	type step struct {
		cluster, user string
		stream        bool
		want          string
		give          int
	}
	take := func(cluster, user string, stream bool, want string) step {
		return step{cluster: cluster, user: user, stream: stream, want: want}
	}
	give := func(n int) step { return step{give: n} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"per caller: streams, then requests; other callers and clusters unaffected", []step{
			take("m1", "alice", true, ""), take("m1", "alice", true, ""),
			take("m1", "alice", true, LimitCallerStreams),
			take("m1", "alice", false, ""),
			take("m1", "alice", false, LimitCallerRequests),
			take("m1", "alice", true, LimitCallerStreams),
			take("m1", "bob", true, ""), take("m1", "bob", false, ""),
			take("m2", "alice", true, ""), take("m2", "alice", false, ""),
		}},
		{"per cluster: streams leave short requests room, then the total", []step{
			take("m1", "alice", true, ""), take("m1", "alice", true, ""),
			take("m1", "bob", true, ""), take("m1", "bob", true, ""),
			take("m1", "carol", true, LimitClusterStreams),
			take("m1", "carol", false, ""), take("m1", "dave", false, ""),
			take("m1", "erin", false, LimitClusterRequests),
			take("m1", "erin", true, LimitClusterStreams),
			take("m2", "erin", true, ""),
		}},
		{"the caller's own limit is named before the cluster's", []step{
			take("m1", "alice", true, ""), take("m1", "alice", true, ""),
			take("m1", "bob", true, ""), take("m1", "bob", true, ""),
			take("m1", "alice", true, LimitCallerStreams),
		}},
		{"a place given back is taken again", []step{
			take("m1", "alice", true, ""), take("m1", "alice", true, ""),
			take("m1", "alice", true, LimitCallerStreams),
			give(1),
			take("m1", "alice", true, ""),
			take("m1", "alice", false, ""),
			take("m1", "alice", false, LimitCallerRequests),
			give(5),
			take("m1", "alice", false, ""),
		}},
		{"giving back twice frees one place", []step{
			take("m1", "alice", true, ""), take("m1", "alice", true, ""),
			give(1), give(1),
			take("m1", "alice", true, ""),
			take("m1", "alice", true, LimitCallerStreams),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			gauges := map[string]int{}
			s := newRelaySlots(lim, func(cluster string, stream bool, delta int) {
				mu.Lock()
				defer mu.Unlock()
				gauges[cluster+" requests"] += delta
				if stream {
					gauges[cluster+" streams"] += delta
				}
			})
			var taken []func()
			for i, st := range tc.steps {
				if st.give > 0 {
					taken[st.give-1]()
					continue
				}
				release, limit := s.acquire(st.cluster, st.user, st.stream)
				if limit != st.want {
					t.Fatalf("step %d (%s %s stream=%v): refused by %q, want %q", i, st.cluster, st.user, st.stream, limit, st.want)
				}
				if limit == "" {
					taken = append(taken, release)
				} else {
					taken = append(taken, func() {})
				}
			}
			// The gauges follow the counts.
			for c, n := range s.clusters {
				if gauges[c+" requests"] != n.requests || gauges[c+" streams"] != n.streams {
					t.Errorf("cluster %s: %+v in flight, gauges say %v", c, *n, gauges)
				}
			}
			for _, r := range taken {
				r()
			}
			if len(s.clusters) != 0 || len(s.callers) != 0 {
				t.Fatalf("after every place was given back: clusters %v, callers %v", s.clusters, s.callers)
			}
			for k, v := range gauges {
				if v != 0 {
					t.Errorf("gauge %s = %d after every place was given back", k, v)
				}
			}
		})
	}
}

func TestRelayLimitsDefaults(t *testing.T) {
	for _, tc := range []struct {
		in, want RelayLimits
	}{
		{RelayLimits{}, RelayLimits{DefaultClusterRequests, DefaultClusterStreams, DefaultCallerRequests, DefaultCallerStreams}},
		{RelayLimits{ClusterRequests: 10, CallerStreams: 1}, RelayLimits{10, DefaultClusterStreams, DefaultCallerRequests, 1}},
	} {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	// The defaults keep the promises the flags' help makes.
	d := RelayLimits{}.WithDefaults()
	if d.ClusterStreams >= d.ClusterRequests || d.CallerRequests >= d.ClusterRequests || d.CallerStreams > d.CallerRequests || d.CallerStreams > d.ClusterStreams {
		t.Fatalf("defaults %+v", d)
	}
}

func TestIsStream(t *testing.T) {
	for _, tc := range []struct {
		verb, query string
		want        bool
	}{
		{"watch", "", true},
		{"list", "watch=yes", true}, // the member's bool: anything but 0 and false
		{"list", "watch=false", false},
		{"list", "watch=0", false},
		{"get", "follow=true", true},
		{"get", "follow=TRUE", true},
		{"get", "follow=False", false},
		{"get", "follow=", true},
		{"get", "timestamps=true", false},
		{"list", "", false},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := isStream(tc.verb, q); got != tc.want {
			t.Errorf("isStream(%s, %s) = %v, want %v", tc.verb, tc.query, got, tc.want)
		}
	}
}

// heldRelay answers a watch or followed log 200 with a body that streams
// nothing until the request's context ends (the real relay's receiver
// ends with it), and anything else 200 at once.
type heldRelay struct {
	mu  sync.Mutex
	got int
}

func (f *heldRelay) Do(ctx context.Context, req *relay.Request) (*relay.Response, error) {
	f.mu.Lock()
	f.got++
	f.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	if !strings.Contains(req.Query, "watch=") && !strings.Contains(req.Query, "follow=") {
		return &relay.Response{Status: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader(`{"from":"member"}`))}, nil
	}
	pr, pw := io.Pipe()
	go func() {
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return &relay.Response{Status: http.StatusOK, Header: h, Body: pr}, nil
}

func (f *heldRelay) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

// TestActThroughRelayLimits: through the handler on a real HTTP server,
// alice's held watches and followed logs take her stream budget; the one
// past it is 429 with Retry-After and a Status naming the limit, not
// forwarded, in the audit log; bob's requests still go; a client going
// away gives its place back (no leak after cancellation); discovery past
// a limit falls back to the cache's catalog.
func TestActThroughRelayLimits(t *testing.T) {
	fr := &heldRelay{}
	admit := func(r *http.Request, _, _ string, _ schema.GroupResource) (relay.Caller, error) {
		return relay.Caller{User: r.Header.Get("X-User")}, nil
	}
	var audit syncBuffer
	freed := make(chan string, 16)
	var mu sync.Mutex
	refused := map[string]int{}
	h := New(&fakeQuery{items: [][]byte{[]byte(podJSON)}}, fakeCatalog(), nil, nil,
		ActThrough(ActThroughConfig{Relay: fr, Admit: admit, ReadYourWrites: -1, PerCallerRate: -1,
			Concurrency: RelayLimits{ClusterRequests: 4, ClusterStreams: 3, CallerRequests: 2, CallerStreams: 2},
			Audit:       slog.New(slog.NewJSONHandler(&audit, nil)),
			ObserveInflight: func(cluster string, stream bool, delta int) {
				if delta < 0 {
					freed <- fmt.Sprintf("%s stream=%v", cluster, stream)
				}
			},
			ObserveRefused: func(cluster, limit string) {
				mu.Lock()
				defer mu.Unlock()
				refused[cluster+" "+limit]++
			}}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(user, method, path string) *http.Response {
		t.Helper()
		r, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-User", user)
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	statusOf := func(t *testing.T, resp *http.Response) metav1.Status {
		t.Helper()
		defer resp.Body.Close()
		var st metav1.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	watch := "/clusters/member2/api/v1/namespaces/shop/events?watch=true"
	follow := "/clusters/member2/api/v1/namespaces/shop/pods/web/log?follow=true"
	w1, w2 := send("alice", "GET", watch), send("alice", "GET", follow)
	for _, resp := range []*http.Response{w1, w2} {
		if resp.StatusCode != 200 {
			t.Fatalf("alice's stream: %d", resp.StatusCode)
		}
	}
	forwarded := fr.count()
	over := send("alice", "GET", watch)
	if over.StatusCode != http.StatusTooManyRequests || over.Header.Get("Retry-After") != "5" {
		t.Fatalf("alice's third stream: %d %v", over.StatusCode, over.Header)
	}
	st := statusOf(t, over)
	if st.Reason != metav1.StatusReasonTooManyRequests || st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Message != LimitCallerStreams ||
		!strings.Contains(st.Message, "--act-through-caller-streams") || !strings.Contains(st.Message, `user "alice" holds 2 streams`) {
		t.Fatalf("alice's third stream: %+v", st)
	}
	if fr.count() != forwarded {
		t.Fatal("a stream past the limit was forwarded")
	}
	// bob: a stream and a short request; the cluster's streams are full
	// then (3), but short requests have room.
	w3 := send("bob", "GET", watch)
	if w3.StatusCode != 200 {
		t.Fatalf("bob's stream: %d", w3.StatusCode)
	}
	if st := statusOf(t, send("carol", "GET", watch)); st.Code != 429 || st.Details.Causes[0].Message != LimitClusterStreams {
		t.Fatalf("carol's stream with the cluster's streams full: %+v", st)
	}
	if resp := send("carol", "PATCH", "/clusters/member2/api/v1/namespaces/shop/pods/web"); resp.StatusCode != 200 {
		t.Fatalf("carol's patch: %d", resp.StatusCode)
	} else {
		_ = resp.Body.Close()
	}
	select {
	case got := <-freed:
		if got != "member2 stream=false" {
			t.Fatalf("carol's patch freed %s", got)
		}
	case <-ctx.Done():
		t.Fatal("carol's patch never gave its place back")
	}
	// Discovery past a limit (alice's requests) is the cache's catalog's answer.
	if resp := send("alice", "GET", "/clusters/member2/api/v1"); resp.StatusCode != 200 {
		t.Fatalf("discovery: %d", resp.StatusCode)
	} else {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(b), "APIResourceList") {
			t.Fatalf("discovery: %s", b)
		}
	}
	// alice goes away from her watch: its place is given back, and her
	// next stream is forwarded.
	_ = w1.Body.Close()
	select {
	case got := <-freed:
		if got != "member2 stream=true" {
			t.Fatalf("freed %s", got)
		}
	case <-ctx.Done():
		t.Fatal("alice's closed watch never gave its place back")
	}
	w4 := send("alice", "GET", watch)
	if w4.StatusCode != 200 {
		t.Fatalf("alice's stream after closing one: %d", w4.StatusCode)
	}
	for _, resp := range []*http.Response{w2, w3, w4} {
		_ = resp.Body.Close()
	}
	for range 3 {
		select {
		case <-freed:
		case <-ctx.Done():
			t.Fatal("a closed stream never gave its place back")
		}
	}
	slots := h.actSlots
	slots.mu.Lock()
	left := len(slots.clusters) + len(slots.callers)
	slots.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d entries left with nothing in flight", left)
	}
	mu.Lock()
	if refused["member2 "+LimitCallerStreams] != 1 || refused["member2 "+LimitClusterStreams] != 1 {
		t.Errorf("refusals observed: %v", refused)
	}
	mu.Unlock()
	var lines int
	for _, l := range bytes.Split(audit.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["limit"] == LimitCallerStreams && m["subject"] == "alice" && m["verb"] == "watch" {
			lines++
		}
	}
	if lines != 1 {
		t.Fatalf("%d audit lines of alice's refused watch:\n%s", lines, audit.Bytes())
	}
}

// syncBuffer is a bytes.Buffer the server's handlers and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}
