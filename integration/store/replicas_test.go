package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetview/fleetview/integration/fixture"
)

// replicaService sends every request to the replica it currently points
// at, as a Kubernetes Service does once the endpoints of a dead pod are
// gone.
type replicaService struct{ target atomic.Pointer[string] }

func (s *replicaService) point(hostport string) { s.target.Store(&hostport) }

func (s *replicaService) wrap(rt http.RoundTripper) http.RoundTripper {
	return fixture.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Host, r.Host = *s.target.Load(), ""
		return rt.RoundTrip(r)
	})
}

// TestServeReplicas runs two `fleetview serve` replicas (the real binary,
// each with its own Badger) on one NATS server fed by a collector of a
// real member cluster, and checks what replicas promise:
//
//   - a resourceVersion one replica issued is honoured by the other (a
//     list not older than it);
//   - a continue token one replica issued is answered by the other with
//     410 Expired and a reason (its snapshot lives in the first
//     replica's Badger), never with a wrong page;
//   - a typed informer behind a "Service" that moves from a replica killed
//     with SIGKILL to the other resumes its watch there from the version
//     it held: no list again, no 410, no event delivered twice or out of
//     order (each churn update sets a larger "gen" label), and it ends
//     equal to the member cluster;
//   - readiness is per replica: the survivor stays ready.
func TestServeReplicas(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	const ns = "replicas"
	fixture.CreateNS(t, ctx, fleet, ns)
	c1 := fleet.Cluster("member1").Clientset()
	var next atomic.Int64
	live := fixture.CreateChurnPods(t, ctx, c1, ns, 8, &next)
	ne := fixture.Member1PodsToNATS(t, fleet, bin)

	logf := fixture.ProcessLog(t, "serve.log")
	a := fixture.StartServe(t, bin, ne.URL, t.TempDir(), logf)
	b := fixture.StartServe(t, bin, ne.URL, t.TempDir(), logf)
	get := func(p *fixture.ServeProc, path string) (int, []byte, error) {
		resp, err := http.Get("http://" + p.HTTP + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	// Ready, and holding member1's pods: each replica on its own.
	podList := "/clusters/member1/api/v1/namespaces/" + ns + "/pods"
	for _, p := range []*fixture.ServeProc{a, b} {
		fixture.Eventually(t, 60*time.Second, func() error {
			p.Running(t)
			code, _, err := get(p, "/readyz/clusters")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("readyz/clusters %d %v", code, err)
			}
			code, body, err := get(p, podList)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("list %d %v %s", code, err, body)
			}
			var l corev1.PodList
			if err := json.Unmarshal(body, &l); err != nil {
				return err
			}
			if len(l.Items) != len(live) {
				var names []string
				for _, p := range l.Items {
					names = append(names, p.Name)
				}
				return fmt.Errorf("%d pods %v, want %v", len(l.Items), names, live)
			}
			return nil
		})
	}

	// A's resourceVersion on B; A's continue token on B.
	code, body, err := get(a, podList+"?limit=3")
	if err != nil || code != http.StatusOK {
		t.Fatalf("page 1 from A: %d %v %s", code, err, body)
	}
	var page corev1.PodList
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if page.Continue == "" || page.ResourceVersion == "" {
		t.Fatalf("page 1 from A has no continue token or resourceVersion: %s", body)
	}
	code, body, err = get(b, podList+"?resourceVersionMatch=NotOlderThan&resourceVersion="+url.QueryEscape(page.ResourceVersion))
	if err != nil || code != http.StatusOK {
		t.Fatalf("B with A's resourceVersion: %d %v %s", code, err, body)
	}
	code, body, err = get(b, podList+"?limit=3&continue="+url.QueryEscape(page.Continue))
	if err != nil {
		t.Fatal(err)
	}
	var st metav1.Status
	if code != http.StatusGone || json.Unmarshal(body, &st) != nil || st.Reason != metav1.StatusReasonExpired || st.Message == "" {
		t.Fatalf("B with A's continue token: want 410 Expired with a message, got %d %s", code, body)
	}
	t.Logf("A's continue token on B: 410 %s: %s", st.Reason, st.Message)

	// A typed informer behind the "Service", on A first.
	var svc replicaService
	svc.point(a.HTTP)
	rec := &fixture.Recorder{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://replicas/clusters/member1",
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return rec.Wrap(svc.wrap(rt)) }})
	if err != nil {
		t.Fatal(err)
	}
	tf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := tf.Core().V1().Pods().Informer()
	var mu sync.Mutex
	var problems []string
	lastGen := map[string]int{} // by uid: 2*gen, +1 once being deleted
	seen := func(p *corev1.Pod) {
		gen, err := strconv.Atoi(p.Labels["gen"])
		if err != nil {
			gen = -1 // not relabelled yet
		}
		// A deletion first sets deletionTimestamp (a change of its own),
		// so a pod's state orders as (gen, being deleted).
		gen *= 2
		if p.DeletionTimestamp != nil {
			gen++
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := lastGen[string(p.UID)]; ok && gen <= prev {
			problems = append(problems, fmt.Sprintf("%s pod %s (uid %s): state %d after %d", time.Now().Format("15:04:05.000"), p.Name, p.UID, gen, prev))
		}
		lastGen[string(p.UID)] = gen
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { seen(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { seen(o.(*corev1.Pod)) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer tf.Shutdown()
	defer close(stop)
	tf.Start(stop)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}

	ch := fixture.StartPodChurn(c1, ns, live, &next)
	// client-go takes a watch that ends within a second of its start,
	// having delivered nothing, for a broken server and lists again: the
	// kill comes once the watch has lived longer and delivered churn.
	fixture.Eventually(t, 30*time.Second, func() error {
		if err := ch.AtLeast(fixture.ChurnCounts{}, 5); err != nil {
			return err
		}
		calls := rec.Since(0)
		if age := time.Since(calls[len(calls)-1].At); age < 2*time.Second {
			return fmt.Errorf("the informer's watch is %s old", age)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, g := range lastGen {
			if g >= 0 {
				return nil
			}
		}
		return fmt.Errorf("the informer has seen no relabelled pod")
	})
	mark := rec.Len()
	killedAt := time.Now()
	t.Logf("kill at %s", killedAt.Format("15:04:05.000"))
	a.Kill9(t)
	svc.point(b.HTTP)
	killed := ch.Counts()
	fixture.Eventually(t, 30*time.Second, func() error { return ch.AtLeast(killed, 5) })
	live = ch.Stop(t)
	equal := func() error {
		l, err := c1.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var want, got []string
		for _, p := range l.Items {
			want = append(want, fmt.Sprintf("%s/%s%v", p.Name, p.UID, p.Labels))
		}
		for _, o := range inf.GetStore().List() {
			p := o.(*corev1.Pod)
			got = append(got, fmt.Sprintf("%s/%s%v", p.Name, p.UID, p.Labels))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("informer (%d pods) differs from member1 (%d pods):\ninformer %v\nmember1  %v", len(got), len(want), got, want)
		}
		return nil
	}
	fixture.Eventually(t, 60*time.Second, equal)
	t.Logf("informer moved from the killed replica to the other and equal to member1 again in %s", time.Since(killedAt).Round(time.Millisecond))
	calls := rec.Since(mark)
	for _, c := range calls {
		if c.List() || c.Expired() {
			t.Fatalf("informer listed again or got 410 after moving to the other replica:%s\nall calls:%s", fixture.Dump(calls), fixture.Dump(rec.Since(0)))
		}
	}
	if !slices.ContainsFunc(calls, func(c fixture.APICall) bool { return c.Watch && c.Status == http.StatusOK }) {
		t.Fatalf("no watch answered by the other replica:%s", fixture.Dump(calls))
	}
	mu.Lock()
	if len(problems) > 0 {
		t.Fatalf("events delivered twice or out of order:\n%v", problems)
	}
	mu.Unlock()
	if code, _, err := get(b, "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("the surviving replica is not ready: %d %v", code, err)
	}
	b.Stop(t)
}
