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

// APICall is one request an informer sent to fleetview, and its answer.
type APICall struct {
	At             time.Time
	method, path   string
	Watch, initial bool // watch=true; sendInitialEvents=true (a streaming list)
	RV             string
	Status         int    // 0: no answer (err)
	Err            string // transport error
	expiredEvent   bool   // a 200 watch that carried an ERROR event with code 410
}

// List reports whether the call fetched the whole state again: a list or
// a streaming list (watch-list).
func (c APICall) List() bool { return !c.Watch || c.initial }

// Expired reports a 410 as the answer or as a watch's ERROR event.
func (c APICall) Expired() bool { return c.Status == http.StatusGone || c.expiredEvent }

func (c APICall) String() string {
	kind := "LIST"
	switch {
	case c.Watch && c.initial:
		kind = "WATCH-LIST"
	case c.Watch:
		kind = "WATCH"
	}
	s := fmt.Sprintf("%s %s %s rv=%q -> %d", c.At.Format("15:04:05.000"), kind, c.path, ShortRV(c.RV), c.Status)
	if c.Err != "" {
		s += " " + c.Err
	}
	if c.expiredEvent {
		s += " +ERROR 410 event"
	}
	return s
}

func ShortRV(rv string) string {
	if len(rv) > 16 {
		return rv[:8] + "…" + rv[len(rv)-8:]
	}
	return rv
}

// Recorder is a rest.Config.WrapTransport that records every request of
// one informer, to tell how it recovered: by resuming its watch or by
// listing again.
type Recorder struct {
	mu    sync.Mutex
	calls []*APICall
}

type RoundTripFunc func(*http.Request) (*http.Response, error)

func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r *Recorder) Wrap(rt http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		c := &APICall{At: time.Now(), method: req.Method, path: req.URL.Path,
			Watch: q.Get("watch") == "true" || q.Get("watch") == "1", initial: q.Get("sendInitialEvents") == "true",
			RV: q.Get("resourceVersion")}
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, c)
		if err != nil {
			c.Err = err.Error()
			return resp, err
		}
		c.Status = resp.StatusCode
		if c.Watch && resp.StatusCode == http.StatusOK {
			resp.Body = &errorEventScanner{ReadCloser: resp.Body, r: r, c: c}
		}
		return resp, nil
	})
}

// Since copies the calls from index i on.
func (r *Recorder) Since(i int) []APICall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []APICall
	for _, c := range r.calls[min(i, len(r.calls)):] {
		out = append(out, *c)
	}
	return out
}

func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func Dump(calls []APICall) string {
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
	r    *Recorder
	c    *APICall
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

// PodChurn creates, relabels, deletes and recreates pods of one namespace
// until stopped.
type PodChurn struct {
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

type ChurnCounts struct{ creates, updates, deletes int64 }

func (c *PodChurn) Counts() ChurnCounts {
	return ChurnCounts{c.creates.Load(), c.updates.Load(), c.deletes.Load()}
}

// AtLeast checks every kind of change happened n times since from.
func (c *PodChurn) AtLeast(from ChurnCounts, n int64) error {
	if err, _ := c.failed.Load().(error); err != nil {
		return err
	}
	now := c.Counts()
	if now.creates-from.creates < n || now.updates-from.updates < n || now.deletes-from.deletes < n {
		return fmt.Errorf("churn since: %d creates, %d updates, %d deletes; want %d of each",
			now.creates-from.creates, now.updates-from.updates, now.deletes-from.deletes, n)
	}
	return nil
}

// CreateChurnPods creates n pods named p-<next> in ns, as the churn
// does, and returns their names.
func CreateChurnPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, n int, next *atomic.Int64) []string {
	t.Helper()
	var live []string
	for range n {
		name := fmt.Sprintf("p-%d", next.Add(1))
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, QPod(ns, name, "churn", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		live = append(live, name)
	}
	return live
}

func StartPodChurn(cs kubernetes.Interface, ns string, live []string, next *atomic.Int64) *PodChurn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &PodChurn{cs: cs, ns: ns, cancel: cancel, done: make(chan error, 1), live: slices.Clone(live), next: next}
	go func() { c.done <- c.run(ctx) }()
	return c
}

// Stop ends the churn and returns the pods that exist.
func (c *PodChurn) Stop(t *testing.T) []string {
	t.Helper()
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("churn: %v", err)
	}
	return c.live
}

func (c *PodChurn) run(ctx context.Context) error {
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
			_, err = pods.Create(ctx, QPod(c.ns, name, "churn", ""), metav1.CreateOptions{})
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
