package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
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

func startUpProc(t testing.TB, bin string, args []string, logw io.Writer) *proc {
	t.Helper()
	return startProc(t, bin, append([]string{"up"}, args...), logw)
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

// TestKubeInformerAcrossKill9 points a typed SharedInformerFactory and a
// dynamic informer at fleetview's per-cluster Kubernetes view of a real
// member cluster, churns the member's pods, and stops `fleetview up` (the
// real binary) three times:
//
//  1. killed with SIGKILL, then stopped with SIGTERM, each time restarted
//     promptly on the same addresses and state dir: the informers resume
//     their watches from the resourceVersion they held (fleetview's token
//     key and streams persist in its JetStream store) and catch up without
//     listing again;
//  2. killed and kept down past the resume window (--max-resume-age), the resumed
//     watch is 410 Expired and the informers list again.
//
// Every time they end equal to the member cluster.
func TestKubeInformerAcrossKill9(t *testing.T) {
	bin := buildFleetview(t)
	ctx := context.Background()
	fleet := startFleet(t, "member1")
	const ns = "churn"
	createNS(t, ctx, fleet, ns)
	c1 := fleet.Cluster("member1").Clientset()
	var next atomic.Int64
	live := createChurnPods(t, ctx, c1, ns, 8, &next)

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	_, natsPort := freePort(t)
	args := []string{"--kubeconfig", kc, "--context", "member1", "--state-dir", stateDir,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--nats-port", strconv.Itoa(natsPort)}
	logf := processLog(t, "up.log")
	rest0 := "http://" + httpAddr
	ready := func(p *proc) {
		t.Helper()
		eventually(t, 60*time.Second, func() error {
			p.running(t)
			resp, err := http.Get(rest0 + "/readyz/clusters")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("readyz/clusters %d", resp.StatusCode)
			}
			return nil
		})
	}

	fv := startUpProc(t, bin, args, logf)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	regs := fleetviewv1.NewRegistryServiceClient(conn)
	eventually(t, 60*time.Second, func() error {
		fv.running(t)
		_, err := regs.ListRegistries(ctx, &fleetviewv1.ListRegistriesRequest{})
		return err
	})
	reg, err := structpb.NewStruct(map[string]any{
		"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "pods"},
		"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1"}},
			"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := regs.ApplyRegistry(ctx, &fleetviewv1.ApplyRegistryRequest{Registry: reg}); err != nil {
		t.Fatal(err)
	}
	ready(fv)

	// The informers, each with its own recording transport.
	view := rest0 + "/clusters/member1"
	typedRec, dynRec := &recorder{}, &recorder{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: view, WrapTransport: typedRec.wrap})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: view, WrapTransport: dynRec.wrap})
	if err != nil {
		t.Fatal(err)
	}
	tf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	typedInf := tf.Core().V1().Pods().Informer()
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	dynInf := df.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Informer()
	stopInf := make(chan struct{})
	defer tf.Shutdown()
	defer df.Shutdown()
	defer close(stopInf)
	tf.Start(stopInf)
	df.Start(stopInf)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), typedInf.HasSynced, dynInf.HasSynced) {
		t.Fatal("informers did not sync")
	}
	type informer struct {
		name string
		inf  cache.SharedIndexInformer
		rec  *recorder
	}
	infs := []informer{{"typed", typedInf, typedRec}, {"dynamic", dynInf, dynRec}}
	// The recorder sees the initial sync (a list or a streaming list):
	// "no list after the restart" below is then a real observation.
	for _, in := range infs {
		if !slices.ContainsFunc(in.rec.since(0), func(c apiCall) bool { return c.list() && c.status == http.StatusOK }) {
			t.Fatalf("%s informer: no initial list recorded:%s", in.name, dump(in.rec.since(0)))
		}
	}

	// equal compares name and labels of what each informer holds with
	// member1's pods; every object must come from member1.
	member := func() ([]string, error) {
		l, err := c1.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, p := range l.Items {
			out = append(out, fmt.Sprintf("%s%v", p.Name, p.Labels))
		}
		slices.Sort(out)
		return out, nil
	}
	equal := func() error {
		want, err := member()
		if err != nil {
			return err
		}
		for _, in := range infs {
			var got []string
			for _, o := range in.inf.GetStore().List() {
				m, err := meta.Accessor(o)
				if err != nil {
					return err
				}
				if c := m.GetAnnotations()["fleetview.io/cluster"]; c != "member1" {
					return fmt.Errorf("%s informer: pod %s from cluster %q", in.name, m.GetName(), c)
				}
				got = append(got, fmt.Sprintf("%s%v", m.GetName(), m.GetLabels()))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s informer (%d pods) differs from member1 (%d pods):\ninformer %v\nmember1  %v", in.name, len(got), len(want), got, want)
			}
		}
		return nil
	}
	eventually(t, 30*time.Second, equal)
	if _, ok := typedInf.GetStore().List()[0].(*corev1.Pod); !ok {
		t.Fatalf("typed informer holds %T", typedInf.GetStore().List()[0])
	}

	// down stops fleetview while pods churn, waits until both informers
	// tried to re-watch the dead server (their resourceVersion is then
	// final) and until the member changed while fleetview was down, for
	// at least minDown; it returns the record marks and the versions the
	// informers held.
	down := func(ch *podChurn, minDown time.Duration, stop func(*testing.T)) (marks []int, rvs []string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error { return ch.atLeast(churnCounts{}, 5) })
		for _, in := range infs {
			marks = append(marks, in.rec.len())
		}
		stop(t)
		killed, at := ch.counts(), time.Now()
		atKill, err := member()
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range infs {
			var rv string
			eventually(t, 30*time.Second, func() error {
				for _, c := range in.rec.since(marks[i]) {
					if c.watch && c.err != "" {
						rv = c.rv
						return nil
					}
				}
				return fmt.Errorf("%s informer has not re-watched the killed fleetview:%s", in.name, dump(in.rec.since(marks[i])))
			})
			if rv == "" || rv != in.inf.LastSyncResourceVersion() {
				t.Fatalf("%s informer re-watched from %q, holds %q", in.name, rv, in.inf.LastSyncResourceVersion())
			}
			rvs = append(rvs, rv)
		}
		eventually(t, 30*time.Second, func() error {
			if d := time.Since(at); d < minDown {
				return fmt.Errorf("down for %s of %s", d, minDown)
			}
			if err := ch.atLeast(killed, 3); err != nil {
				return err
			}
			// The informers must learn of changes made while fleetview
			// was down.
			now, err := member()
			if err != nil {
				return err
			}
			if slices.Equal(now, atKill) {
				return fmt.Errorf("member1 is as it was at the kill")
			}
			return nil
		})
		return marks, rvs
	}
	// afterRestart lets the churn go on against the restarted fleetview,
	// stops it, and waits for the informers to equal member1.
	afterRestart := func(ch *podChurn) {
		t.Helper()
		restarted := ch.counts()
		eventually(t, 30*time.Second, func() error { fv.running(t); return ch.atLeast(restarted, 5) })
		live = ch.stop(t)
		eventually(t, 60*time.Second, equal)
	}

	// Phase 1: restarted promptly, the informers resume their watches,
	// after a kill -9 and after a graceful stop alike (a stopping
	// fleetview ends Kubernetes watches as kube-apiserver does, without an
	// ERROR event that would make reflectors list again).
	for _, stop := range []struct {
		name string
		do   func(*testing.T)
	}{{"kill -9", func(t *testing.T) { fv.kill9(t) }}, {"SIGTERM", func(t *testing.T) { fv.stop(t) }}} {
		start := time.Now()
		ch := startPodChurn(c1, ns, live, &next)
		marks, rvs := down(ch, 0, stop.do)
		fv = startUpProc(t, bin, args, logf)
		afterRestart(ch)
		t.Logf("phase 1 (%s): down, restarted and equal again in %s", stop.name, time.Since(start).Round(time.Millisecond))
		for i, in := range infs {
			calls := in.rec.since(marks[i])
			var resumed *apiCall
			for _, c := range calls {
				if c.list() {
					t.Fatalf("%s informer listed again after the restart (%s):%s", in.name, stop.name, dump(calls))
				}
				if c.expired() {
					t.Fatalf("%s informer got 410 after the restart (%s):%s", in.name, stop.name, dump(calls))
				}
				if resumed == nil && c.status == http.StatusOK {
					resumed = &c
				}
			}
			if resumed == nil || resumed.rv != rvs[i] {
				t.Fatalf("%s informer: want its first answered request a watch from the version it held (%s):%s", in.name, shortRV(rvs[i]), dump(calls))
			}
			t.Logf("%s informer after %s:%s", in.name, stop.name, dump(calls))
		}
	}

	// Phase 2: down past the resume window, the informers get 410 and
	// list again.
	{
		start := time.Now()
		const window = 2 * time.Second
		ch := startPodChurn(c1, ns, live, &next)
		// The versions the informers hold were issued before the kill:
		// down for the window and a second (versions carry whole seconds),
		// each is older than the window when fleetview answers again.
		marks, rvs := down(ch, window+time.Second, func(t *testing.T) { fv.kill9(t) })
		fv = startUpProc(t, bin, append(slices.Clone(args), "--max-resume-age", window.String()), logf)
		afterRestart(ch)
		t.Logf("phase 2: down, restarted and equal again in %s", time.Since(start).Round(time.Millisecond))
		for i, in := range infs {
			calls := in.rec.since(marks[i])
			gone := slices.IndexFunc(calls, func(c apiCall) bool { return c.watch && c.rv != "" && c.expired() })
			if gone < 0 || calls[gone].rv != rvs[i] {
				t.Fatalf("%s informer: want a watch from the version it held (%s) answered 410:%s", in.name, shortRV(rvs[i]), dump(calls))
			}
			if !slices.ContainsFunc(calls[gone+1:], func(c apiCall) bool { return c.list() && c.status == http.StatusOK }) {
				t.Fatalf("%s informer: no list after the 410:%s", in.name, dump(calls))
			}
			t.Logf("%s informer after the second kill:%s", in.name, dump(calls))
		}
	}
	fv.stop(t)
}
