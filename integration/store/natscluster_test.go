package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	"github.com/fleetview/fleetview/internal/tlsfiles/tlstest"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func statesEqual(a, b map[string]fixture.PodState) bool {
	return maps.EqualFunc(a, b, func(x, y fixture.PodState) bool { return x.RV == y.RV && maps.Equal(x.Labels, y.Labels) })
}

func diffStates(got, want map[string]fixture.PodState) string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[n]; !ok {
			fmt.Fprintf(&b, " missing %s;", n)
		} else if !statesEqual(map[string]fixture.PodState{n: g}, map[string]fixture.PodState{n: want[n]}) {
			fmt.Fprintf(&b, " %s: %s want %s;", n, g, want[n])
		}
	}
	for _, n := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[n]; !ok {
			fmt.Fprintf(&b, " ghost %s;", n)
		}
	}
	return b.String()
}

func memberPods(ctx context.Context, cs kubernetes.Interface, ns string) (map[string]fixture.PodState, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]fixture.PodState{}
	for _, p := range l.Items {
		out[p.Name] = fixture.PodState{RV: p.ResourceVersion, Labels: p.Labels}
	}
	return out, nil
}

// watchRecord follows a hub's gRPC watch of a namespace's pods from its
// initial events on, keeping every event.
type watchRecord struct {
	mu       sync.Mutex
	state    map[string]fixture.PodState // the initial events, then every change applied
	seen     map[string]bool             // type/name/rv of every event: a second one is a duplicate
	dups     []string
	backward []string // an object's resourceVersion going back: events out of order
	events   int
	synced   chan struct{}
	err      error
}

func startWatchRecord(ctx context.Context, h *fixture.ClusterHub, cluster, ns string) *watchRecord {
	w := &watchRecord{state: map[string]fixture.PodState{}, seen: map[string]bool{}, synced: make(chan struct{})}
	go func() {
		err := w.run(ctx, h, cluster, ns)
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	return w
}

func (w *watchRecord) run(ctx context.Context, h *fixture.ClusterHub, cluster, ns string) error {
	st, err := h.Query.Watch(ctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: ns, Clusters: []string{cluster},
		SendInitialEvents: true, AllowBookmarks: true})
	if err != nil {
		return err
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch ended: %w", err)
		}
		if ev.GetInitialEventsEnd() {
			select {
			case <-w.synced:
			default:
				close(w.synced)
			}
			continue
		}
		if ev.GetType() == "BOOKMARK" {
			continue
		}
		raw := ev.GetRawObject()
		if len(raw) == 0 && ev.GetObject() != nil {
			if raw, err = protojson.Marshal(ev.GetObject()); err != nil {
				return err
			}
		}
		var m fixture.ObjMeta
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("watch event %s: %w", ev.GetType(), err)
		}
		name, rv := m.Metadata.Name, m.Metadata.ResourceVersion
		w.mu.Lock()
		w.events++
		key := ev.GetType() + "/" + name + "/" + rv
		if w.seen[key] {
			w.dups = append(w.dups, key)
		}
		w.seen[key] = true
		if prev, ok := w.state[name]; ok && ev.GetType() != "ADDED" && rvLess(rv, prev.RV) {
			w.backward = append(w.backward, fmt.Sprintf("%s %s after %s", name, rv, prev.RV))
		}
		switch ev.GetType() {
		case "DELETED":
			delete(w.state, name)
		default:
			w.state[name] = fixture.PodState{RV: rv, Labels: m.Metadata.Labels}
		}
		w.mu.Unlock()
	}
}

// rvLess compares two member resourceVersions (etcd revisions).
func rvLess(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// check compares what the watch built with want and reports duplicates
// and reordering.
func (w *watchRecord) check(want map[string]fixture.PodState) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if len(w.dups) > 0 {
		return fmt.Errorf("duplicate watch events: %v", w.dups)
	}
	if len(w.backward) > 0 {
		return fmt.Errorf("watch events out of order: %v", w.backward)
	}
	if !statesEqual(w.state, want) {
		return fmt.Errorf("the watch's replayed state differs from the member:%s", diffStates(w.state, want))
	}
	return nil
}

// TestNATSClusterKill9 runs three `fleetview up` hubs whose embedded NATS
// servers form a JetStream cluster with --stream-replicas 3, a real
// `fleetview collector` of a real kube-apiserver connected to all three
// URLs, and kills with SIGKILL the hub whose NATS server leads the
// member's stream twice: during a steady pod churn, and in the middle of a
// bulk ingest (FV_NATSCLUSTER_BULK pods created by eight writers). Each
// time the two others must go on (the stall from the kill to the next
// applied event is logged), end equal to the member (names,
// resourceVersions, labels, no ghosts), and the watches opened on them
// before the kill (four per hub) must have neither duplicated nor
// reordered events and replay to the member's state. The killed hub then
// restarts and catches up. Last, the collector is killed while the member
// churns, and restarted: every hub must end equal to the member. The
// routes between the hubs use mutual TLS.
func TestNATSClusterKill9(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	const ns = "churn"
	fixture.CreateNS(t, ctx, fleet, ns)
	c1 := fleet.Cluster("member1").Clientset()
	var next atomic.Int64
	var live []string
	seed := fixture.EnvInt(t, "FV_NATSCLUSTER_PODS", 200)
	for range seed {
		name := fmt.Sprintf("p-%d", next.Add(1))
		if _, err := c1.CoreV1().Pods(ns).Create(ctx, fixture.QPod(ns, name, "churn", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		live = append(live, name)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "hubs.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	colLog := filepath.Join(t.TempDir(), "collector.log")
	defer func() {
		if t.Failed() {
			for _, f := range []string{logf.Name(), colLog} {
				// Whole, where they outlive the test's directory.
				keep := filepath.Join(os.TempDir(), "TestNATSClusterKill9-"+filepath.Base(f))
				if b, err := os.ReadFile(f); err == nil && os.WriteFile(keep, b, 0o644) == nil {
					t.Logf("%s kept as %s", filepath.Base(f), keep)
				}
				b, _ := os.ReadFile(f)
				if len(b) > 12000 {
					b = b[len(b)-12000:]
				}
				t.Logf("%s (tail):\n%s", filepath.Base(f), b)
			}
		}
	}()

	start := time.Now()
	hubs := fixture.StartClusterHubs(t, bin, 3, 3, logf)
	t.Logf("three hubs up, JetStream cluster formed, in %s", time.Since(start).Round(time.Millisecond))
	for _, h := range hubs {
		if err := tlstest.NATSOverTLS(h.RouteAddr, h.RouteTLS); err != nil {
			t.Fatalf("%s: the route listener over TLS with a member's certificate: %v", h.Name, err)
		}
		if err := tlstest.NATSOverTLS(h.RouteAddr, &tls.Config{RootCAs: h.RouteTLS.RootCAs, ServerName: "localhost", MinVersion: tls.VersionTLS12}); err == nil {
			t.Fatalf("%s: the route listener admitted TLS without a client certificate", h.Name)
		}
	}
	if _, err := hubs[0].Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, h := range hubs {
		urls = append(urls, h.NATSURL)
	}
	cf, err := os.Create(colLog)
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	collectorArgs := []string{"collector", "--cluster", "member1", "--kubeconfig", kc, "--context", "member1",
		"--nats-url", strings.Join(urls, ","), "--stream-replicas", "3", "--heartbeat", "1s",
		"--publish-ack-timeout", envString("FV_NATSCLUSTER_ACK_TIMEOUT", "5s")}
	col := fixture.StartProc(t, bin, collectorArgs, cf)

	equalOn := func(hs ...*fixture.ClusterHub) func() error {
		return func() error {
			want, err := memberPods(ctx, c1, ns)
			if err != nil {
				return err
			}
			for _, h := range hs {
				got, err := h.HubPods(ctx, "member1", ns)
				if err != nil {
					return err
				}
				if !statesEqual(got, want) {
					return fmt.Errorf("%s (%d pods) differs from member1 (%d pods):%s", h.Name, len(got), len(want), diffStates(got, want))
				}
			}
			return nil
		}
	}
	fixture.Eventually(t, 120*time.Second, equalOn(hubs...))
	t.Logf("initial sync of %d pods on all three hubs in %s", seed, time.Since(start).Round(time.Millisecond))

	// Everything fleetview made is replicated three times.
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{stream.StreamName("member1"), "FV_DEAD", "KV_" + natsnames.RegistryBucket, "KV_" + natsnames.RegistryStatusBucket, "KV_" + natsnames.ClusterBucket, "KV_fv_query"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}
	leaderOf := func() (string, error) {
		s, err := js.Stream(ctx, stream.StreamName("member1"))
		if err != nil {
			return "", err
		}
		ci := s.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" {
			return "", errors.New("no leader")
		}
		return ci.Leader, nil
	}

	// Two phases, each killing the hub whose NATS server leads the
	// member's stream: during a steady churn, then in the middle of a
	// bulk ingest. A load is started by start and waited for by finish;
	// killNow tells when it is time to kill.
	type load struct {
		start   func()
		killNow func() error
		finish  func()
	}
	var ch *fixture.PodChurn
	var killedAt fixture.ChurnCounts
	churn := load{
		start:   func() { ch = fixture.StartPodChurn(c1, ns, live, &next) },
		killNow: func() error { return ch.AtLeast(fixture.ChurnCounts{}, 10) },
		finish: func() {
			fixture.Eventually(t, 60*time.Second, func() error { return ch.AtLeast(killedAt, 20) })
			live = ch.Stop(t)
		},
	}
	bulkN := fixture.EnvInt(t, "FV_NATSCLUSTER_BULK", 1500)
	var bulkDone chan error
	var bulkBase map[string]uint64
	var bulkSurvivors []*fixture.ClusterHub
	bulk := load{
		start: func() {
			bulkBase = map[string]uint64{}
			for _, h := range bulkSurvivors {
				bulkBase[h.Name] = h.Applied("member1")
			}
			bulkDone = make(chan error, 1)
			go func() {
				// Eight writers: faster than the member apiserver takes
				// one at a time, so the stream has a backlog to ingest.
				var g sync.WaitGroup
				errs := make(chan error, 8)
				var n atomic.Int64
				for range 8 {
					g.Go(func() {
						for i := n.Add(1); i <= int64(bulkN); i = n.Add(1) {
							if _, err := c1.CoreV1().Pods(ns).Create(ctx, fixture.QPod(ns, fmt.Sprintf("bulk-%d", i), "bulk", ""), metav1.CreateOptions{}); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				g.Wait()
				close(errs)
				bulkDone <- <-errs
			}()
		},
		killNow: func() error {
			for _, h := range bulkSurvivors {
				if got := h.Applied("member1") - bulkBase[h.Name]; got < uint64(bulkN/3) {
					return fmt.Errorf("%s applied %d of the bulk's %d", h.Name, got, bulkN)
				}
			}
			select {
			case err := <-bulkDone:
				t.Fatalf("the bulk ingest ended before the kill (raise FV_NATSCLUSTER_BULK): %v", err)
			default:
			}
			return nil
		},
		finish: func() {
			select {
			case err := <-bulkDone:
				if err != nil {
					t.Fatalf("bulk create: %v", err)
				}
			case <-time.After(5 * time.Minute):
				t.Fatal("bulk create did not end")
			}
		},
	}
	for pi, phase := range []struct {
		name string
		load load
	}{{"churn", churn}, {"bulk ingest", bulk}} {
		leader, err := leaderOf()
		if err != nil {
			t.Fatal(err)
		}
		victim := slices.IndexFunc(hubs, func(h *fixture.ClusterHub) bool { return h.Name == leader })
		if victim < 0 {
			t.Fatalf("stream leader %q is none of the hubs", leader)
		}
		var survivors []*fixture.ClusterHub
		for i, h := range hubs {
			if i != victim {
				survivors = append(survivors, h)
			}
		}
		bulkSurvivors = survivors

		// A watch storm on the survivors across the kill: several watches
		// on each.
		wctx, stopWatch := context.WithCancel(ctx)
		var watches []*watchRecord
		for _, h := range survivors {
			for range 4 {
				watches = append(watches, startWatchRecord(wctx, h, "member1", ns))
			}
		}
		for _, w := range watches {
			select {
			case <-w.synced:
			case <-time.After(60 * time.Second):
				t.Fatalf("a watch sent no end of initial events: %v", w.check(nil))
			}
		}

		// Latency of a new pod reaching both survivors.
		probe := func(name string) time.Duration {
			t.Helper()
			at := time.Now()
			if _, err := c1.CoreV1().Pods(ns).Create(ctx, fixture.QPod(ns, name, "probe", ""), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			fixture.Eventually(t, 120*time.Second, func() error {
				for _, h := range survivors {
					got, err := h.HubPods(ctx, "member1", ns)
					if err != nil {
						return err
					}
					if _, ok := got[name]; !ok {
						return fmt.Errorf("%s has no %s yet", h.Name, name)
					}
				}
				return nil
			})
			return time.Since(at)
		}
		baseline := probe(fmt.Sprintf("probe-before-%d", pi))

		phase.load.start()
		fixture.Eventually(t, 120*time.Second, phase.load.killNow)
		before := map[string]uint64{}
		for _, h := range survivors {
			before[h.Name] = h.Applied("member1")
		}
		if ch != nil {
			killedAt = ch.Counts()
		}
		hubs[victim].Kill9(t)
		killAt := time.Now()
		// End to end: a pod created right at the kill (the member's
		// apiserver does not depend on NATS) until both survivors serve
		// it. Events committed before the kill but not yet applied do
		// not count here, as they can for the next applied event.
		atKill := fmt.Sprintf("probe-at-kill-%d", pi)
		if _, err := c1.CoreV1().Pods(ns).Create(ctx, fixture.QPod(ns, atKill, "probe", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Both at once: polling one after the other would time the
		// second late.
		var endToEnd time.Duration
		stalls := map[string]time.Duration{}
		fixture.Eventually(t, 120*time.Second, func() error {
			for _, h := range survivors {
				if _, ok := stalls[h.Name]; !ok && h.Applied("member1") > before[h.Name] {
					stalls[h.Name] = time.Since(killAt)
				}
			}
			if endToEnd == 0 {
				seen := 0
				for _, h := range survivors {
					got, err := h.HubPods(ctx, "member1", ns)
					if err == nil {
						if _, ok := got[atKill]; ok {
							seen++
						}
					}
				}
				if seen == len(survivors) {
					endToEnd = time.Since(killAt)
				}
			}
			if len(stalls) < len(survivors) || endToEnd == 0 {
				return fmt.Errorf("since the kill: applied %v, %s on both survivors: %v", stalls, atKill, endToEnd != 0)
			}
			return nil
		})
		var newLeader string
		fixture.Eventually(t, 60*time.Second, func() error {
			var err error
			if newLeader, err = leaderOf(); err == nil && newLeader == leader {
				err = fmt.Errorf("%s still leads", leader)
			}
			return err
		})
		afterKill := probe(fmt.Sprintf("probe-after-%d", pi))
		phase.load.finish()
		fixture.Eventually(t, 180*time.Second, equalOn(survivors...))
		converged := time.Since(killAt)
		want, err := memberPods(ctx, c1, ns)
		if err != nil {
			t.Fatal(err)
		}
		watched := 0
		for _, w := range watches {
			fixture.Eventually(t, 60*time.Second, func() error { return w.check(want) })
			w.mu.Lock()
			watched += w.events
			w.mu.Unlock()
		}
		stopWatch()
		t.Logf("%s: killed %s (leader of %s; %s leads now): next event applied after %v; a pod created at the kill reached both survivors after %s; a pod made after the election reached both survivors in %s (before the kill: %s); survivors equal to member1 (%d pods) %s after the kill; %d watches on the survivors saw %d events, none duplicated or out of order, each replaying to member1",
			phase.name, leader, stream.StreamName("member1"), newLeader, roundAll(stalls), endToEnd.Round(time.Millisecond), afterKill.Round(time.Millisecond), baseline.Round(time.Millisecond),
			len(want), converged.Round(time.Millisecond), len(watches), watched)

		// The killed hub comes back and catches up.
		restartAt := time.Now()
		hubs[victim].Start(t, bin, logf)
		hubs[victim].WaitAPI(t)
		fixture.Eventually(t, 180*time.Second, equalOn(hubs...))
		t.Logf("%s: %s restarted and equal to member1 again in %s", phase.name, hubs[victim].Name, time.Since(restartAt).Round(time.Millisecond))
	}

	// The collector cut off (killed) while the member changes: creates,
	// label updates and deletes it never saw. Restarted, it relists, and
	// every hub ends equal to the member: no ghost of a deleted pod, no
	// stale label.
	col.Kill9(t)
	ch = fixture.StartPodChurn(c1, ns, live, &next)
	fixture.Eventually(t, 60*time.Second, func() error { return ch.AtLeast(fixture.ChurnCounts{}, 20) })
	live = ch.Stop(t)
	if err := equalOn(hubs...)(); err == nil {
		t.Fatal("the hubs equal the member with the collector down: the churn changed nothing they hold")
	}
	restartAt := time.Now()
	fixture.StartProc(t, bin, collectorArgs, cf)
	fixture.Eventually(t, 120*time.Second, equalOn(hubs...))
	t.Logf("collector cut off through %d churned pods, restarted: all three hubs equal to member1 in %s", len(live), time.Since(restartAt).Round(time.Millisecond))
	for _, h := range hubs {
		h.Stop(t)
	}
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func roundAll(m map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, v := range m {
		out[k] = v.Round(time.Millisecond)
	}
	return out
}

// BenchmarkNATSReplication publishes the same pod events (about 3 KiB each,
// async with a bounded window, as the collector does) into a cluster
// stream on a single server with one replica and on a three-member
// cluster (in this process, so on the same cores) with three, in the same
// run: what R3 replication costs JetStream ingest. FV_REPL_PODS sets the
// count (100,000).
//
//	go test -run '^$' -bench NATSReplication -benchtime 1x ./integration/store/
func BenchmarkNATSReplication(b *testing.B) {
	n := fixture.EnvInt(b, "FV_REPL_PODS", 100000)
	for _, tc := range []struct {
		name     string
		members  int
		replicas int
	}{{"single-R1", 1, 1}, {"cluster-R3", 3, 3}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				urls := startNATSMembers(b, tc.members)
				nc, err := nats.Connect(urls)
				if err != nil {
					b.Fatal(err)
				}
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				fixture.Eventually(b, 60*time.Second, func() error {
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					_, _, err := stream.EnsureStream(actx, js, "bench", tc.replicas, 0, 0)
					return err
				})
				pub, err := benchdata.NewPublisher(nc)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				sent, err := pub.Publish(ctx, func(yield func(*fleetviewv1.ResourceEvent) bool) {
					for i := range n {
						if !yield(benchdata.Event("bench", i, 1)) {
							return
						}
					}
				})
				if err != nil || sent != n {
					b.Fatalf("published %d of %d: %v", sent, n, err)
				}
				d := time.Since(start)
				b.ReportMetric(float64(n)/d.Seconds(), "events/s")
				b.Logf("%s: %d pod events acknowledged in %s (%.0f/s)", tc.name, n, d.Round(time.Millisecond), float64(n)/d.Seconds())
				nc.Close()
			}
		})
	}
}

// startNATSMembers starts n embedded servers in this process, routed to
// each other when n > 1, and returns their client URLs as one list.
func startNATSMembers(tb testing.TB, n int) string {
	tb.Helper()
	var routes []*url.URL
	ports := make([]int, n)
	for i := range n {
		addr, port := fixture.FreePort(tb)
		ports[i] = port
		routes = append(routes, &url.URL{Scheme: "nats", Host: addr})
	}
	var urls []string
	srvs := make([]*natsserver.Server, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			o := natsserver.Options{StoreDir: tb.TempDir(), Port: -1, ServerName: fmt.Sprintf("m%d", i)}
			if n > 1 {
				o.Cluster = natsserver.ClusterOptions{Name: "fv", Host: "127.0.0.1", Port: ports[i], Routes: routes}
			}
			var err error
			srvs[i], err = natsserver.Start(o)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
	for _, s := range srvs {
		tb.Cleanup(s.Shutdown)
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}
