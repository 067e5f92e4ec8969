package kubeapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relay"
)

func TestCallerLimits(t *testing.T) {
	c := newCallerLimits(1, 2)
	now := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false} {
		if got := c.allow("alice", now); got != want {
			t.Fatalf("alice's request %d: %v, want %v", i, got, want)
		}
	}
	if !c.allow("bob", now) {
		t.Fatal("bob pays for alice")
	}
	if !c.allow("alice", now.Add(time.Second)) {
		t.Fatal("alice's bucket did not refill")
	}
	// Full: callers idle past a refill are forgotten, the others kept.
	for i := range maxLimitedCallers - 2 {
		c.allow(fmt.Sprint("idle-", i), now)
	}
	later := now.Add(10 * time.Second)
	c.allow("alice", later)
	c.allow("new", later)
	if _, ok := c.callers["alice"]; !ok || len(c.callers) != 2 {
		t.Fatalf("%d callers kept after forgetting the idle ones", len(c.callers))
	}
}

// TestActThroughCallerRate: beyond its rate a caller's forwarded request
// is 429 with Retry-After, before it is forwarded; discovery counts like
// every request that reaches a member (issue #43: a path shaped like
// discovery escaped the rate); other callers are not affected.
func TestActThroughCallerRate(t *testing.T) {
	fr := &fakeRelay{}
	admit := func(r *http.Request, _, _ string, _ schema.GroupResource) (relay.Caller, error) {
		return relay.Caller{User: r.Header.Get("X-User")}, nil
	}
	var observed []string
	observe := func(cluster, verb string, code int, _ time.Duration) {
		observed = append(observed, fmt.Sprintf("%s %s %d", cluster, verb, code))
	}
	h := New(&fakeQuery{items: [][]byte{[]byte(podJSON)}}, fakeCatalog(), nil, nil,
		ActThrough(ActThroughConfig{Relay: fr, Admit: admit, PerCallerRate: 0.001, PerCallerBurst: 2, ReadYourWrites: -1, Observe: observe}))
	send := func(user, method, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader("{}"))
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := send("alice", "GET", "/clusters/member1/api/v1"); w.Code != 200 {
		t.Fatalf("discovery: %d", w.Code)
	}
	patch := "/clusters/member1/api/v1/namespaces/shop/pods/web"
	if w := send("alice", "PATCH", patch); w.Code != 200 {
		t.Fatalf("patch: %d %s", w.Code, w.Body)
	}
	forwarded := len(fr.got)
	for _, over := range []struct{ method, path string }{{"PATCH", patch}, {"GET", "/clusters/member1/api/v1"}, {"GET", "/clusters/member1/openapi/v3"}} {
		w := send("alice", over.method, over.path)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `user \"alice\" sends more than`) {
			t.Fatalf("%s %s over the rate: %d %v %s", over.method, over.path, w.Code, w.Header(), w.Body)
		}
	}
	if len(fr.got) != forwarded {
		t.Fatal("a request over the rate was forwarded")
	}
	if w := send("bob", "PATCH", patch); w.Code != 200 {
		t.Fatalf("bob: %d", w.Code)
	}
	want := "member1 get 200,member1 patch 200,member1 patch 429,member1 get 429,member1 get 429,member1 patch 200"
	if got := strings.Join(observed, ","); got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
}
