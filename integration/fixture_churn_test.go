package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// apiCall is one request an informer sent to fleetview, and its answer.
type apiCall struct {
	at             time.Time
	method, path   string
	watch, initial bool // watch=true; sendInitialEvents=true (a streaming list)
	rv             string
	status         int    // 0: no answer (err)
	err            string // transport error
	expiredEvent   bool   // a 200 watch that carried an ERROR event with code 410
}

// list reports whether the call fetched the whole state again: a list or
// a streaming list (watch-list).
func (c apiCall) list() bool { return !c.watch || c.initial }

// expired reports a 410 as the answer or as a watch's ERROR event.
func (c apiCall) expired() bool { return c.status == http.StatusGone || c.expiredEvent }

func (c apiCall) String() string {
	kind := "LIST"
	switch {
	case c.watch && c.initial:
		kind = "WATCH-LIST"
	case c.watch:
		kind = "WATCH"
	}
	s := fmt.Sprintf("%s %s %s rv=%q -> %d", c.at.Format("15:04:05.000"), kind, c.path, shortRV(c.rv), c.status)
	if c.err != "" {
		s += " " + c.err
	}
	if c.expiredEvent {
		s += " +ERROR 410 event"
	}
	return s
}

func shortRV(rv string) string {
	if len(rv) > 16 {
		return rv[:8] + "…" + rv[len(rv)-8:]
	}
	return rv
}

// recorder is a rest.Config.WrapTransport that records every request of
// one informer, to tell how it recovered: by resuming its watch or by
// listing again.
type recorder struct {
	mu    sync.Mutex
	calls []*apiCall
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		c := &apiCall{at: time.Now(), method: req.Method, path: req.URL.Path,
			watch: q.Get("watch") == "true" || q.Get("watch") == "1", initial: q.Get("sendInitialEvents") == "true",
			rv: q.Get("resourceVersion")}
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, c)
		if err != nil {
			c.err = err.Error()
			return resp, err
		}
		c.status = resp.StatusCode
		if c.watch && resp.StatusCode == http.StatusOK {
			resp.Body = &errorEventScanner{ReadCloser: resp.Body, r: r, c: c}
		}
		return resp, nil
	})
}

// since copies the calls from index i on.
func (r *recorder) since(i int) []apiCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []apiCall
	for _, c := range r.calls[min(i, len(r.calls)):] {
		out = append(out, *c)
	}
	return out
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func dump(calls []apiCall) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString("\n  " + c.String())
	}
	return b.String()
}

// errorEventScanner reads a watch's JSON lines as the client does and
// marks the call when one is an ERROR event carrying a 410 Status.
type errorEventScanner struct {
	io.ReadCloser
	r    *recorder
	c    *apiCall
	line []byte
}

func (s *errorEventScanner) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.line = append(s.line, b...)
			break
		}
		s.line = append(s.line, b[:i]...)
		b = b[i+1:]
		if bytes.Contains(s.line, []byte(`"ERROR"`)) {
			var ev struct {
				Type   string        `json:"type"`
				Object metav1.Status `json:"object"`
			}
			if json.Unmarshal(s.line, &ev) == nil && ev.Type == "ERROR" && ev.Object.Code == http.StatusGone {
				s.r.mu.Lock()
				s.c.expiredEvent = true
				s.r.mu.Unlock()
			}
		}
		s.line = s.line[:0]
	}
	return n, err
}

// podChurn creates, relabels, deletes and recreates pods of one namespace
// until stopped.
type podChurn struct {
	cs                        kubernetes.Interface
	ns                        string
	creates, updates, deletes atomic.Int64
	cancel                    context.CancelFunc
	done                      chan error
	live                      []string // names that exist
	dead                      []string // names deleted, to recreate (a new uid under an old name)
	next                      *atomic.Int64
	failed                    atomic.Value // error: why the churn gave up
}

type churnCounts struct{ creates, updates, deletes int64 }

func (c *podChurn) counts() churnCounts {
	return churnCounts{c.creates.Load(), c.updates.Load(), c.deletes.Load()}
}

// atLeast checks every kind of change happened n times since from.
func (c *podChurn) atLeast(from churnCounts, n int64) error {
	if err, _ := c.failed.Load().(error); err != nil {
		return err
	}
	now := c.counts()
	if now.creates-from.creates < n || now.updates-from.updates < n || now.deletes-from.deletes < n {
		return fmt.Errorf("churn since: %d creates, %d updates, %d deletes; want %d of each",
			now.creates-from.creates, now.updates-from.updates, now.deletes-from.deletes, n)
	}
	return nil
}

// createChurnPods creates n pods named p-<next> in ns, as the churn
// does, and returns their names.
func createChurnPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, n int, next *atomic.Int64) []string {
	t.Helper()
	var live []string
	for range n {
		name := fmt.Sprintf("p-%d", next.Add(1))
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, qpod(ns, name, "churn", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		live = append(live, name)
	}
	return live
}

func startPodChurn(cs kubernetes.Interface, ns string, live []string, next *atomic.Int64) *podChurn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &podChurn{cs: cs, ns: ns, cancel: cancel, done: make(chan error, 1), live: slices.Clone(live), next: next}
	go func() { c.done <- c.run(ctx) }()
	return c
}

// stop ends the churn and returns the pods that exist.
func (c *podChurn) stop(t *testing.T) []string {
	t.Helper()
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("churn: %v", err)
	}
	return c.live
}

func (c *podChurn) run(ctx context.Context) error {
	// A pace, not a wait: about 50 changes a second, so a second of
	// downtime leaves plenty for fleetview to catch up on.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	pods := c.cs.CoreV1().Pods(c.ns)
	failures := 0
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var err error
		switch op := i % 4; {
		case op == 0 || len(c.live) < 4 || op == 3 && len(c.live) < 20:
			name := fmt.Sprintf("p-%d", c.next.Add(1))
			if op == 3 && len(c.dead) > 0 {
				name, c.dead = c.dead[len(c.dead)-1], c.dead[:len(c.dead)-1]
			}
			_, err = pods.Create(ctx, qpod(c.ns, name, "churn", ""), metav1.CreateOptions{})
			if err == nil {
				c.live = append(c.live, name)
				c.creates.Add(1)
			}
		case op == 1:
			name := c.live[rand.IntN(len(c.live))]
			patch := fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, i)
			_, err = pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err == nil {
				c.updates.Add(1)
			}
		default:
			k := rand.IntN(len(c.live))
			name := c.live[k]
			err = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err == nil {
				c.live = slices.Delete(c.live, k, k+1)
				c.dead = append(c.dead, name)
				c.deletes.Add(1)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The member apiserver of a loaded CI machine can refuse or
			// time out a request now and then: the churn goes on with
			// the next change, and gives up (saying why) only when it
			// keeps failing.
			if failures++; failures > 50 {
				c.failed.Store(fmt.Errorf("churn: %d changes in a row failed, the last: %w", failures, err))
				return err
			}
			continue
		}
		failures = 0
	}
}
