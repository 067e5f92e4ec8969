package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var (
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	widgetsGVR    = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

// subjState is the last message of one object subject.
type subjState struct {
	typ          fleetviewv1.EventType
	rv, ns, name string
	object       map[string]any
	payloadLen   int
	seq          uint64
}

// streamState reads the last message of every object subject of a resource:
// what any consumer replaying the stream would end up with.
func streamState(ctx context.Context, js jetstream.JetStream, cluster string, gvr schema.GroupVersionResource) (map[string]subjState, error) {
	cons, err := js.OrderedConsumer(ctx, stream.StreamName(cluster), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.ResourceFilter(cluster, gvr)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]subjState{}
	pending := info.NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			pending = md.NumPending
			ev, err := stream.Decode(m.Subject(), m.Data())
			if err != nil {
				return nil, err
			}
			st := subjState{typ: ev.GetType(), rv: ev.GetResourceVersion(), ns: ev.GetNamespace(), name: ev.GetName(), seq: md.Sequence.Stream, payloadLen: len(m.Data())}
			if len(ev.GetObject()) > 0 {
				if err := json.Unmarshal(ev.GetObject(), &st.object); err != nil {
					return nil, err
				}
			}
			out[ev.GetUid()] = st
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("no messages with %d pending", pending)
		}
	}
	return out, nil
}

type clusterObj struct{ rv, ns, name string }

func clusterState(ctx context.Context, c *harness.Cluster, gvr schema.GroupVersionResource, namespaces ...string) (map[string]clusterObj, error) {
	out := map[string]clusterObj{}
	for _, ns := range namespaces {
		l, err := c.Dynamic().Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out[string(it.GetUID())] = clusterObj{it.GetResourceVersion(), it.GetNamespace(), it.GetName()}
		}
	}
	return out, nil
}

// sameState is nil when the stream's upserts are exactly the cluster's
// objects at the same resourceVersions: nothing missing, nothing extra.
func sameState(st map[string]subjState, cl map[string]clusterObj) error {
	var diffs []string
	for uid, o := range cl {
		s, ok := st[uid]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s/%s", o.ns, o.name))
		case s.typ != fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			diffs = append(diffs, fmt.Sprintf("%s/%s is %s in the stream", o.ns, o.name, s.typ))
		case s.rv != o.rv:
			diffs = append(diffs, fmt.Sprintf("%s/%s at rv %s in the stream, %s in the cluster", o.ns, o.name, s.rv, o.rv))
		}
	}
	for uid, s := range st {
		if _, ok := cl[uid]; !ok && s.typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			diffs = append(diffs, fmt.Sprintf("ghost %s/%s (uid %s)", s.ns, s.name, uid))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
		}
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

// minimalRepublish is how many object messages a collector restarting with
// this stream must publish to reach this cluster state: changed or new
// objects, plus tombstones for ghosts. Anything more is re-ingestion.
func minimalRepublish(st map[string]subjState, cl map[string]clusterObj) int {
	n := 0
	for uid, o := range cl {
		if s, ok := st[uid]; !ok || s.typ != fleetviewv1.EventType_EVENT_TYPE_UPSERT || s.rv != o.rv {
			n++
		}
	}
	for uid, s := range st {
		if _, ok := cl[uid]; !ok && s.typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			n++
		}
	}
	return n
}

// settle waits until what a killed collector had in flight has reached the
// server: the stream's last sequence stops moving.
func settle(t *testing.T, e *fixture.NATSEnv, cluster string) uint64 {
	t.Helper()
	prev := uint64(0)
	var cur uint64
	fixture.Eventually(t, 30*time.Second, func() error {
		var err error
		if cur, err = lastSeq(context.Background(), e.JS, cluster); err != nil {
			return err
		}
		if cur != prev {
			prev = cur
			return fmt.Errorf("stream still growing (%d)", cur)
		}
		return nil
	})
	return cur
}

func lastSeq(ctx context.Context, js jetstream.JetStream, cluster string) (uint64, error) {
	s, err := js.Stream(ctx, stream.StreamName(cluster))
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// waitConverged waits until the stream equals the cluster and a SYNCED
// marker newer than after was published.
func waitConverged(t *testing.T, e *fixture.NATSEnv, c *harness.Cluster, cluster string, gvr schema.GroupVersionResource, after uint64, p *fixture.CollectorProc, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	fixture.Eventually(t, 120*time.Second, func() error {
		if p != nil && !p.Alive() {
			t.Fatalf("collector exited:\n%s", p.Tail())
		}
		typ, seq, err := fixture.LastControl(ctx, e.JS, cluster, gvr)
		if err != nil {
			return err
		}
		if typ != fleetviewv1.EventType_EVENT_TYPE_SYNCED || seq <= after {
			return fmt.Errorf("last control event %s at %d, want SYNCED after %d", typ, seq, after)
		}
		st, err := streamState(ctx, e.JS, cluster, gvr)
		if err != nil {
			return err
		}
		cl, err := clusterState(ctx, c, gvr, namespaces...)
		if err != nil {
			return err
		}
		return sameState(st, cl)
	})
}

// churn creates, updates and deletes ConfigMaps (names reused, so deletes
// and re-creates give new UIDs under old names) until stop is called.
type churner struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ops    int64
	mu     sync.Mutex
}

func startChurn(cs kubernetes.Interface, ns string, names, workers int) *churner {
	ctx, cancel := context.WithCancel(context.Background())
	ch := &churner{cancel: cancel}
	for w := range workers {
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			cms := cs.CoreV1().ConfigMaps(ns)
			for ctx.Err() == nil {
				name := fmt.Sprintf("cm-%d", r.IntN(names))
				cm, err := cms.Get(ctx, name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
					_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
				case err != nil:
				case r.IntN(3) == 0:
					err = cms.Delete(ctx, name, metav1.DeleteOptions{})
				default:
					cm.Data = map[string]string{"v": strconv.Itoa(r.IntN(1 << 30))}
					_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				}
				if err == nil {
					ch.mu.Lock()
					ch.ops++
					ch.mu.Unlock()
				}
			}
		}()
	}
	return ch
}

func (ch *churner) stop() int64 {
	ch.cancel()
	ch.wg.Wait()
	return ch.ops
}

func createNamespaces(t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func registryConditions(t *testing.T, e *fixture.NATSEnv, name string) ([]metav1.Condition, error) {
	t.Helper()
	r, err := e.Registries.Get(context.Background(), name)
	if err != nil {
		return nil, err
	}
	return r.Status.Conditions, nil
}

func wantCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, msgParts ...string) error {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return fmt.Errorf("no condition %s in %+v", typ, conds)
	}
	if c.Status != status || c.Reason != reason {
		return fmt.Errorf("condition %s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	for _, p := range msgParts {
		if !strings.Contains(c.Message, p) {
			return fmt.Errorf("condition %s message %q does not mention %q", typ, c.Message, p)
		}
	}
	return nil
}

// TestCollector runs `fleetview collector` as a child process against one
// real kube-apiserver and an embedded NATS server, and checks that the
// stream equals the member cluster through kill -9, registry edits, NATS
// and apiserver outages. Subtests use their own collector cluster names
// (hence streams), namespaces and NATS servers; they share the apiserver.
func TestCollector(t *testing.T) {
	bin := fixture.BuildFleetview(t)
	fleet := fixture.StartFleet(t, "colk")
	c := fleet.Cluster("colk")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	ce := fixture.CollectorEnv{Bin: bin, Kubeconfig: kc, Context: "colk"}
	cs := c.Clientset()
	ctx := context.Background()

	t.Run("kill -9 during churn; restart republishes only changes", func(t *testing.T) {
		k := &killRestart{parent: t, ce: ce, c: c, cs: cs, e: fixture.StartNATS(t), cl: "kc", ns: "churn"}
		createNamespaces(t, cs, k.ns)
		k.e.Apply(t, fixture.RegistryFor("churn", []string{k.cl}, fixture.Sel("v1", "ConfigMap", k.ns)))
		if !t.Run("restarts under churn republish only the changes", k.restartsUnderChurn) {
			t.FailNow()
		}
		// Quiescent restarts: a known set of changes while the collector is
		// down, including a UID reuse (delete + create under the same name).
		if !t.Run("restarts after known changes publish exactly them", k.restartsAfterKnownChanges) {
			t.FailNow()
		}
		t.Run("a name reused while it runs tombstones the old UID", k.reuseWhileRunning)
	})

	t.Run("registry edits, secrets, status, CRD installed later, large object", func(t *testing.T) {
		e := fixture.StartNATS(t)
		const cl, cl2 = "kr", "kr2"
		createNamespaces(t, cs, "rega", "regb")
		must := fixture.MustOK(t)
		must(cs.CoreV1().ConfigMaps("rega").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}))
		must(cs.CoreV1().ConfigMaps("regb").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y"}}, metav1.CreateOptions{}))
		must(cs.CoreV1().Secrets("rega").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{}))

		e.Apply(t, fixture.RegistryFor("r1", []string{cl, cl2}, fixture.Sel("v1", "ConfigMap", "rega")))
		p := ce.Start(t, cl, e.URL)
		p2 := ce.Start(t, cl2, e.URL)
		rr := &registryRun{ce: ce, c: c, e: e, cl: cl, cl2: cl2, p: p, p2: p2}
		for _, phase := range []struct {
			name string
			run  func(*testing.T)
		}{
			{"two collectors writing one registry's status both keep their conditions", rr.twoCollectorsStatus},
			{"a namespace added to the scope is synced", rr.namespaceAdded},
			{"a second registry over a covered namespace does not resync ConfigMaps", rr.overlappingRegistry},
			{"secrets are metadata-only by default", rr.secretsStripped},
			{"secret data opted in is republished with the data", rr.secretDataOptIn},
			{"a shrunk scope tombstones what left it", rr.scopeShrunk},
			{"a resource no registry selects is removed, then purged", rr.resourceRemoved},
			{"a CRD installed later is synced by the running collector", rr.crdInstalledLater},
			{"a large object is published whole; one over NATS's max payload is refused loudly", rr.largeObject},
			{"the inventory has served APIs, resource state and counters", rr.inventoryRecord},
			{"a registry deleted while the collector is down is removed on restart", rr.deletedWhileDown},
		} {
			if !t.Run(phase.name, phase.run) {
				t.FailNow() // the phases after it build on what it left
			}
		}
	})

	t.Run("NATS restarted during churn loses nothing", func(t *testing.T) {
		e := fixture.StartNATS(t)
		// kn buffers up to the default 64 MiB while NATS is down; kn2 has a
		// reconnect buffer smaller than one ConfigMap's message, so its
		// first publish during the outage overflows and its watch must
		// resume from its last acknowledged resourceVersion once NATS is
		// back (collector/resume.go). (A larger one would hold what the
		// collector sends during an outage: its pacer stops at its window
		// of publishes awaiting acknowledgement, 2 to 256.)
		const cl, cl2, ns = "kn", "kn2", "natsrestart"
		createNamespaces(t, cs, ns)
		e.Apply(t, fixture.RegistryFor("n", []string{cl, cl2}, fixture.Sel("v1", "ConfigMap", ns)))
		p := ce.Start(t, cl, e.URL)
		metrics2 := fixture.FreeAddr(t)
		p2 := ce.Start(t, cl2, e.URL, "--nats-reconnect-buffer", "256", "--metrics-addr", metrics2)
		waitConverged(t, e, c, cl, configMapsGVR, 0, p, ns)
		waitConverged(t, e, c, cl2, configMapsGVR, 0, p2, ns)
		ch := startChurn(cs, ns, 80, 3)
		time.Sleep(2 * time.Second) // churn while connected
		e.Stop()
		time.Sleep(3 * time.Second) // churn while NATS is down
		e.Start()
		time.Sleep(2 * time.Second) // churn after it is back
		ops := ch.stop()
		for _, x := range []struct {
			cl string
			p  *fixture.CollectorProc
		}{{cl, p}, {cl2, p2}} {
			fixture.Eventually(t, 120*time.Second, func() error {
				if !x.p.Alive() {
					t.Fatalf("collector %s exited:\n%s", x.cl, x.p.Tail())
				}
				st, err := streamState(ctx, e.JS, x.cl, configMapsGVR)
				if err != nil {
					return err
				}
				clu, err := clusterState(ctx, c, configMapsGVR, ns)
				if err != nil {
					return err
				}
				if err := sameState(st, clu); err != nil {
					return fmt.Errorf("%s: %w", x.cl, err)
				}
				return nil
			})
		}
		rec, err := inventory.Get(ctx, e.Inv, cl2)
		if err != nil {
			t.Fatal(err)
		}
		fams, err := fixture.Scrape(metrics2)
		if err != nil {
			t.Fatal(err)
		}
		var resumes float64
		for _, m := range fixture.Series(fams, "fleetview_collector_watch_resumes_total", map[string]string{"cluster": cl2}) {
			resumes += m.GetCounter().GetValue()
		}
		if rec.Counters == nil || rec.Counters.PublishErrors == 0 || resumes == 0 {
			t.Fatalf("%s: counters %+v, %v resumes: the overflow path (publish error -> resume) was not exercised", cl2, rec.Counters, resumes)
		}
		t.Logf("%d churn ops across a NATS restart; both streams equal the cluster; %s overflowed: %+v, %v resumes", ops, cl2, *rec.Counters, resumes)
	})

	t.Run("cluster info from a ConfigMap drives ClusterAffinity", func(t *testing.T) {
		e := fixture.StartNATS(t)
		const cl, ns, cmName = "ki", "infons", "info-ki"
		createNamespaces(t, cs, ns)
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := fixture.RegistryFor("byfield", nil, fixture.Sel("v1", "ConfigMap", ns))
		r.Spec.TargetCluster = registry.ClusterAffinity{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			FieldSelector: &registry.FieldSelector{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: registry.FieldProvider, Operator: corev1.NodeSelectorOpIn, Values: []string{"aws"}}}},
		}
		e.Apply(t, r)
		p := ce.Start(t, cl, e.URL, "--cluster-info-configmap", "kube-system/"+cmName, "--zone", "flag-zone")
		fixture.Eventually(t, 30*time.Second, func() error {
			rec, err := inventory.Get(ctx, e.Inv, cl)
			if err != nil {
				return err
			}
			if !rec.Ready || rec.Zone != "flag-zone" || rec.Provider != "" || len(rec.Resources) != 0 {
				return fmt.Errorf("before the ConfigMap: %+v", rec)
			}
			return nil
		})
		info := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: "kube-system"},
			Data: map[string]string{"provider": "aws", "region": "eu-west-1", "zone": "cm-zone", "labels": "env=prod, team=a"}}
		if _, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, info, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitConverged(t, e, c, cl, configMapsGVR, 0, p, ns)
		fixture.Eventually(t, 30*time.Second, func() error {
			rec, err := inventory.Get(ctx, e.Inv, cl)
			if err != nil {
				return err
			}
			// The flag's zone wins over the ConfigMap's.
			if rec.Provider != "aws" || rec.Region != "eu-west-1" || rec.Zone != "flag-zone" || rec.Labels["env"] != "prod" || rec.Labels["team"] != "a" {
				return fmt.Errorf("inventory %+v", rec)
			}
			conds, err := registryConditions(t, e, "byfield")
			if err != nil {
				return err
			}
			return wantCondition(conds, registry.ClusterConditionType(cl, registry.ClusterMatched), metav1.ConditionTrue, registry.ReasonClusterMatched)
		})
		// Relabel the cluster: the registry no longer selects it, so its
		// objects are removed and its conditions withdrawn.
		info.Data["labels"] = "env=dev"
		if _, err := cs.CoreV1().ConfigMaps("kube-system").Update(ctx, info, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 30*time.Second, func() error {
			typ, _, err := fixture.LastControl(ctx, e.JS, cl, configMapsGVR)
			if err != nil {
				return err
			}
			if typ != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
				return fmt.Errorf("last control event %s", typ)
			}
			if st, err := streamState(ctx, e.JS, cl, configMapsGVR); err != nil || len(st) != 0 {
				return fmt.Errorf("%d subjects left (%v)", len(st), err)
			}
			conds, err := registryConditions(t, e, "byfield")
			if err != nil {
				return err
			}
			if meta.FindStatusCondition(conds, registry.ClusterConditionType(cl, registry.ClusterMatched)) != nil {
				return fmt.Errorf("condition of a cluster that no longer matches: %+v", conds)
			}
			return wantCondition(conds, registry.ConditionMatched, metav1.ConditionFalse, registry.ReasonNoClusterMatched)
		})
	})

	t.Run("member apiserver down: not ready within 30s, recovers", func(t *testing.T) {
		e := fixture.StartNATS(t)
		const cl, ns = "ka", "apiserverdown"
		createNamespaces(t, cs, ns)
		e.Apply(t, fixture.RegistryFor("a", []string{cl}, fixture.Sel("v1", "ConfigMap", ns)))
		p := ce.Start(t, cl, e.URL)
		waitConverged(t, e, c, cl, configMapsGVR, 0, p, ns)
		down := time.Now()
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 30*time.Second, func() error {
			rec, err := inventory.Get(ctx, e.Inv, cl)
			if err != nil {
				return err
			}
			if rec.Ready {
				return fmt.Errorf("still ready")
			}
			return nil
		})
		t.Logf("not ready %s after the apiserver stopped", time.Since(down).Round(time.Second))
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if err := c.Restart(rctx); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		fixture.Eventually(t, 90*time.Second, func() error {
			rec, err := inventory.Get(ctx, e.Inv, cl)
			if err != nil {
				return err
			}
			if !rec.Ready {
				return fmt.Errorf("not ready again: %s", rec.Message)
			}
			st, err := streamState(ctx, e.JS, cl, configMapsGVR)
			if err != nil {
				return err
			}
			clu, err := clusterState(ctx, c, configMapsGVR, ns)
			if err != nil {
				return err
			}
			if len(clu) != 1 {
				return fmt.Errorf("%d objects", len(clu))
			}
			return sameState(st, clu)
		})
		if !p.Alive() {
			t.Fatalf("collector exited:\n%s", p.Tail())
		}
	})
}

// killRestart is what the phases of TestCollector's "kill -9 during churn;
// restart republishes only changes" hand on, one to the next: collector cl
// publishing the ConfigMaps of member namespace ns into e, and p, the
// collector running now. A phase starts collectors for parent, so the one
// it leaves running outlives it.
type killRestart struct {
	parent *testing.T
	ce     fixture.CollectorEnv
	c      *harness.Cluster
	cs     kubernetes.Interface
	e      *fixture.NATSEnv
	cl, ns string
	p      *fixture.CollectorProc
}

// start starts the collector again, for the rest of the test.
func (k *killRestart) start(t *testing.T) *fixture.CollectorProc {
	t.Helper()
	k.p = k.ce.StartFor(k.parent, t, k.cl, k.e.URL)
	return k.p
}

// restartsUnderChurn kills the collector -9 six times under churn; each
// restart publishes exactly what changed or went while it was down.
func (k *killRestart) restartsUnderChurn(t *testing.T) {
	ctx := context.Background()
	e, c, cs, cl, ns := k.e, k.c, k.cs, k.cl, k.ns
	ch := startChurn(cs, ns, 60, 3)
	time.Sleep(500 * time.Millisecond) // some objects before the first start; not a wait for a condition
	p := k.start(t)
	for round := range 6 {
		// Let the collector work under churn for a while, then kill it.
		time.Sleep(time.Duration(1000+rand.IntN(2500)) * time.Millisecond)
		p.Kill()
		time.Sleep(500 * time.Millisecond) // churn while it is down
		ops := ch.stop()
		settle(t, e, cl)
		st, err := streamState(ctx, e.JS, cl, configMapsGVR)
		if err != nil {
			t.Fatal(err)
		}
		clu, err := clusterState(ctx, c, configMapsGVR, ns)
		if err != nil {
			t.Fatal(err)
		}
		want := minimalRepublish(st, clu)
		before, err := lastSeq(ctx, e.JS, cl)
		if err != nil {
			t.Fatal(err)
		}
		p = k.start(t)
		waitConverged(t, e, c, cl, configMapsGVR, before, p, ns)
		after, _ := lastSeq(ctx, e.JS, cl)
		// Exactly the changed objects and ghosts, plus one SYNCED marker.
		if got := int(after - before - 1); got != want {
			t.Fatalf("round %d: restart published %d object messages, want exactly %d (changed or gone since the kill)", round, got, want)
		}
		t.Logf("round %d: %d churn ops, %d objects, restart republished %d messages (the changes only)", round, ops, len(clu), want)
		ch = startChurn(cs, ns, 60, 3)
	}
	ch.stop()
	waitConverged(t, e, c, cl, configMapsGVR, 0, p, ns)
}

// restartsAfterKnownChanges makes a known set of changes while the
// collector is down, three times: the restart publishes exactly them, and
// a name deleted and created again tombstones its old UID.
func (k *killRestart) restartsAfterKnownChanges(t *testing.T) {
	ctx := context.Background()
	e, c, cs, cl, ns, p := k.e, k.c, k.cs, k.cl, k.ns, k.p
	for round := range 3 {
		p.Kill()
		before := settle(t, e, cl)
		st, _ := streamState(ctx, e.JS, cl, configMapsGVR)
		var live []string
		for _, s := range st {
			if s.typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
				live = append(live, s.name)
			}
		}
		sort.Strings(live)
		if len(live) < 6 {
			t.Fatalf("only %d live objects", len(live))
		}
		cms := cs.CoreV1().ConfigMaps(ns)
		for _, n := range live[:2] { // 2 updates
			cm, err := cms.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm.Data = map[string]string{"v": "round" + strconv.Itoa(round)}
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range live[2:4] { // 2 deletes
			if err := cms.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		reused := live[4] // UID reuse: tombstone for the old UID, upsert for the new
		old, err := cms.Get(ctx, reused, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, reused, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: reused}, Data: map[string]string{"v": "reborn"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%d", round)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p = k.start(t)
		waitConverged(t, e, c, cl, configMapsGVR, before, p, ns)
		after, _ := lastSeq(ctx, e.JS, cl)
		// 2 updates + 2 tombstones + (tombstone + upsert) + 1 create + SYNCED.
		if got := after - before; got != 8 {
			t.Fatalf("quiet round %d: %d messages after restart, want 8", round, got)
		}
		st, _ = streamState(ctx, e.JS, cl, configMapsGVR)
		if s := st[string(old.UID)]; s.typ != fleetviewv1.EventType_EVENT_TYPE_DELETE {
			t.Fatalf("reused name %s: old uid %s is %s in the stream, want a tombstone", reused, old.UID, s.typ)
		}
	}
}

// reuseWhileRunning deletes and creates a ConfigMap under one name while
// the collector runs: the old UID is tombstoned.
func (k *killRestart) reuseWhileRunning(t *testing.T) {
	ctx := context.Background()
	e, c, cs, cl, ns := k.e, k.c, k.cs, k.cl, k.ns
	// And a UID reuse while it runs.
	cms := cs.CoreV1().ConfigMaps(ns)
	old, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "reuse-live"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, configMapsGVR)
		if err != nil {
			return err
		}
		if st[string(old.UID)].typ != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			return fmt.Errorf("reuse-live not published yet")
		}
		return nil
	})
	if err := cms.Delete(ctx, "reuse-live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "reuse-live"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, configMapsGVR)
		if err != nil {
			return err
		}
		if st[string(old.UID)].typ != fleetviewv1.EventType_EVENT_TYPE_DELETE {
			return fmt.Errorf("old uid of reuse-live not tombstoned")
		}
		clu, err := clusterState(ctx, c, configMapsGVR, ns)
		if err != nil {
			return err
		}
		return sameState(st, clu)
	})
}

// registryRun is what the phases of TestCollector's "registry edits,
// secrets, status, CRD installed later, large object" hand on, one to the
// next: collectors cl and cl2 (p and p2) of member c's namespaces rega and
// regb into e, and registry r2 as last applied.
type registryRun struct {
	ce      fixture.CollectorEnv
	c       *harness.Cluster
	e       *fixture.NATSEnv
	cl, cl2 string
	p, p2   *fixture.CollectorProc
	r2      *registry.ResourceRegistry
}

// twoCollectorsStatus syncs r1 into kr and kr2, both writing r1's status:
// each cluster's condition survives the other's writes. kr2 is stopped
// after it.
func (rr *registryRun) twoCollectorsStatus(t *testing.T) {
	c, e, cl, cl2, p, p2 := rr.c, rr.e, rr.cl, rr.cl2, rr.p, rr.p2
	waitConverged(t, e, c, cl, configMapsGVR, 0, p, "rega")
	waitConverged(t, e, c, cl2, configMapsGVR, 0, p2, "rega")
	// Two collectors write r1's status concurrently; both survive.
	fixture.Eventually(t, 30*time.Second, func() error {
		conds, err := registryConditions(t, e, "r1")
		if err != nil {
			return err
		}
		for _, x := range []string{cl, cl2} {
			if err := wantCondition(conds, registry.ClusterConditionType(x, registry.ClusterMatched), metav1.ConditionTrue, registry.ReasonClusterMatched, "configmaps/v1 (namespace rega)"); err != nil {
				return err
			}
		}
		return wantCondition(conds, registry.ConditionMatched, metav1.ConditionTrue, registry.ReasonClustersMatched, "clusters: kr, kr2")
	})
	p2.Kill()
}

// namespaceAdded adds regb to r1: kr syncs both namespaces.
func (rr *registryRun) namespaceAdded(t *testing.T) {
	ctx := context.Background()
	c, e, cl, p := rr.c, rr.e, rr.cl, rr.p
	// Add a namespace to the scope.
	e.Apply(t, fixture.RegistryFor("r1", []string{cl}, fixture.Sel("v1", "ConfigMap", "rega"), fixture.Sel("v1", "ConfigMap", "regb")))
	seq, _ := lastSeq(ctx, e.JS, cl)
	waitConverged(t, e, c, cl, configMapsGVR, seq, p, "rega", "regb")
}

// overlappingRegistry applies r2, selecting ConfigMaps in regb (already in
// r1) and Secrets: the Secrets sync, the ConfigMaps are not resynced.
func (rr *registryRun) overlappingRegistry(t *testing.T) {
	ctx := context.Background()
	c, e, cl, p := rr.c, rr.e, rr.cl, rr.p
	// A second registry selecting the same resource in a namespace
	// already covered, plus Secrets: ConfigMaps are neither restarted nor
	// republished; Secrets arrive stripped.
	_, cmSyncSeq, err := fixture.LastControl(ctx, e.JS, cl, configMapsGVR)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := lastSeq(ctx, e.JS, cl)
	e.Apply(t, fixture.RegistryFor("r2", []string{cl}, fixture.Sel("v1", "ConfigMap", "regb"), fixture.Sel("v1", "Secret", "rega")))
	waitConverged(t, e, c, cl, secretsGVR, seq, p, "rega")
	if _, s, _ := fixture.LastControl(ctx, e.JS, cl, configMapsGVR); s != cmSyncSeq {
		t.Fatalf("ConfigMaps were resynced (marker %d -> %d) by a registry that did not change their scope", cmSyncSeq, s)
	}
}

// secretsStripped checks r2's Secrets: published without data, annotated as
// stripped, and r2's SecretData condition says so.
func (rr *registryRun) secretsStripped(t *testing.T) {
	ctx := context.Background()
	e, cl := rr.e, rr.cl
	st, _ := streamState(ctx, e.JS, cl, secretsGVR)
	for _, s := range st {
		if _, has := s.object["data"]; has {
			t.Fatalf("secret %s/%s published with data by default", s.ns, s.name)
		}
		ann, _ := s.object["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann["fleetview.io/secret-data"] != "stripped" {
			t.Fatalf("stripped secret lacks the annotation: %v", ann)
		}
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		conds, err := registryConditions(t, e, "r2")
		if err != nil {
			return err
		}
		return wantCondition(conds, registry.ConditionSecretData, metav1.ConditionFalse, registry.ReasonStripped)
	})
}

// secretDataOptIn sets r2's includeSecretData: the same Secret is
// republished with its data, and the condition says so.
func (rr *registryRun) secretDataOptIn(t *testing.T) {
	ctx := context.Background()
	e, cl := rr.e, rr.cl
	// Opt in: the same Secret (same resourceVersion) is republished with data.
	r2 := fixture.RegistryFor("r2", []string{cl}, fixture.Sel("v1", "ConfigMap", "regb"), fixture.Sel("v1", "Secret", "rega"))
	r2.Spec.IncludeSecretData = true
	e.Apply(t, r2)
	fixture.Eventually(t, 60*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, secretsGVR)
		if err != nil {
			return err
		}
		for _, s := range st {
			d, _ := s.object["data"].(map[string]any)
			if d["password"] != "aHVudGVyMg==" {
				return fmt.Errorf("secret %s/%s data %v", s.ns, s.name, s.object["data"])
			}
		}
		conds, err := registryConditions(t, e, "r2")
		if err != nil {
			return err
		}
		return wantCondition(conds, registry.ConditionSecretData, metav1.ConditionTrue, registry.ReasonIncluded)
	})
	rr.r2 = r2
}

// scopeShrunk takes regb's ConfigMaps out of both registries: they are
// tombstoned.
func (rr *registryRun) scopeShrunk(t *testing.T) {
	ctx := context.Background()
	c, e, cl, r2 := rr.c, rr.e, rr.cl, rr.r2
	// Shrink: r1 back to rega only, r2 without ConfigMaps -> regb's
	// objects get tombstones.
	e.Apply(t, fixture.RegistryFor("r1", []string{cl}, fixture.Sel("v1", "ConfigMap", "rega")))
	r2.Spec.ResourceSelectors = []registry.ResourceSelector{fixture.Sel("v1", "Secret", "rega")}
	e.Apply(t, r2)
	fixture.Eventually(t, 60*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, configMapsGVR)
		if err != nil {
			return err
		}
		clu, err := clusterState(ctx, c, configMapsGVR, "rega")
		if err != nil {
			return err
		}
		return sameState(st, clu)
	})
}

// resourceRemoved deletes r2, the only registry with Secrets: a
// RESOURCE_REMOVED control event, then no Secret subjects left.
func (rr *registryRun) resourceRemoved(t *testing.T) {
	ctx := context.Background()
	e, cl := rr.e, rr.cl
	// Remove Secrets from every registry: control event, then purge.
	if err := e.Registries.Delete(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		typ, _, err := fixture.LastControl(ctx, e.JS, cl, secretsGVR)
		if err != nil {
			return err
		}
		if typ != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			return fmt.Errorf("last secrets control event %s", typ)
		}
		st, err := streamState(ctx, e.JS, cl, secretsGVR)
		if err != nil {
			return err
		}
		if len(st) != 0 {
			return fmt.Errorf("%d secret subjects left after removal", len(st))
		}
		return nil
	})
}

// crdInstalledLater applies r3 for Widgets the member does not serve yet (a
// condition says so), then installs their CRD and a Widget: the running
// collector syncs it and the condition turns true.
func (rr *registryRun) crdInstalledLater(t *testing.T) {
	ctx := context.Background()
	c, e, cl, p := rr.c, rr.e, rr.cl, rr.p
	// A resource the cluster does not serve, then its CRD installed.
	e.Apply(t, fixture.RegistryFor("r3", []string{cl}, fixture.Sel("example.com/v1", "Widget", "")))
	fixture.Eventually(t, 30*time.Second, func() error {
		conds, err := registryConditions(t, e, "r3")
		if err != nil {
			return err
		}
		return wantCondition(conds, registry.ClusterConditionType(cl, registry.ClusterAPIsServed), metav1.ConditionFalse, registry.ReasonNotServed, "cluster kr", "Widget example.com/v1")
	})
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}},
	}}
	if _, err := c.Dynamic().Resource(fixture.CRDGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	widget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": "rega"}, "spec": map[string]any{"size": 3}}}
	fixture.Eventually(t, 60*time.Second, func() error { // until the CRD is established
		_, err := c.Dynamic().Resource(widgetsGVR).Namespace("rega").Create(ctx, widget, metav1.CreateOptions{})
		return err
	})
	fixture.Eventually(t, 60*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, widgetsGVR)
		if err != nil {
			return err
		}
		clu, err := clusterState(ctx, c, widgetsGVR, "rega")
		if err != nil {
			return err
		}
		if len(clu) != 1 {
			return fmt.Errorf("%d widgets in the cluster", len(clu))
		}
		if err := sameState(st, clu); err != nil {
			return err
		}
		conds, err := registryConditions(t, e, "r3")
		if err != nil {
			return err
		}
		return wantCondition(conds, registry.ClusterConditionType(cl, registry.ClusterAPIsServed), metav1.ConditionTrue, registry.ReasonAllServed)
	})
	if !p.Alive() {
		t.Fatalf("collector restarted or exited:\n%s", p.Tail())
	}
}

// largeObject creates a Widget of 1.4 MiB: kr publishes it whole, and kbig,
// against a NATS server taking 1 MiB, refuses it in its status, inventory
// and metrics and keeps running.
func (rr *registryRun) largeObject(t *testing.T) {
	ctx := context.Background()
	ce, c, e, cl := rr.ce, rr.c, rr.e, rr.cl
	// An object of ~1.4 MiB (near etcd's 1.5 MiB limit; ConfigMaps and
	// Secrets stop at 1 MiB, so a custom resource) is published whole.
	// A collector whose NATS server only takes 1 MiB messages refuses it
	// loudly: status condition, inventory, metric.
	small := fixture.StartNATSWith(t, 1<<20)
	small.Apply(t, fixture.RegistryFor("rbig", []string{"kbig"}, fixture.Sel("example.com/v1", "Widget", "rega")))
	metricsAddr := fixture.FreeAddr(t)
	pb := ce.Start(t, "kbig", small.URL, "--metrics-addr", metricsAddr)
	waitConverged(t, small, c, "kbig", widgetsGVR, 0, pb, "rega")
	blob := strings.Repeat("x", 1400<<10)
	bigW := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "big", "namespace": "rega"}, "spec": map[string]any{"blob": blob}}}
	if _, err := c.Dynamic().Resource(widgetsGVR).Namespace("rega").Create(ctx, bigW, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 60*time.Second, func() error {
		st, err := streamState(ctx, e.JS, cl, widgetsGVR)
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.name == "big" && s.typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
				spec, _ := s.object["spec"].(map[string]any)
				if spec["blob"] != blob {
					return fmt.Errorf("big Widget published truncated")
				}
				return nil
			}
		}
		return fmt.Errorf("big Widget not in the stream")
	})
	fixture.Eventually(t, 60*time.Second, func() error {
		conds, err := registryConditions(t, small, "rbig")
		if err != nil {
			return err
		}
		if err := wantCondition(conds, registry.ClusterConditionType("kbig", registry.ClusterPublished), metav1.ConditionFalse, registry.ReasonObjectsRefused, "rega/big", "NATS max payload 1048576"); err != nil {
			return err
		}
		rec, err := inventory.Get(ctx, small.Inv, "kbig")
		if err != nil {
			return err
		}
		if rec.Counters == nil || rec.Counters.Refused != 1 {
			return fmt.Errorf("inventory counters %+v, want 1 refused", rec.Counters)
		}
		body, err := httpGet("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `fleetview_collector_refused_objects_total{cluster="kbig"} 1`) {
			return fmt.Errorf("metric not reported:\n%s", body)
		}
		return nil
	})
	// Refused, not dropped silently and not retried in a loop: the
	// collector keeps running and the other widget is there.
	if !pb.Alive() {
		t.Fatalf("collector exited:\n%s", pb.Tail())
	}
}

// inventoryRecord checks kr's inventory record.
func (rr *registryRun) inventoryRecord(t *testing.T) {
	ctx := context.Background()
	e, cl := rr.e, rr.cl
	// Inventory: served APIs, per-resource state, counters.
	fixture.Eventually(t, 30*time.Second, func() error {
		rec, err := inventory.Get(ctx, e.Inv, cl)
		if err != nil {
			return err
		}
		if !rec.Ready || rec.KubernetesVersion == "" {
			return fmt.Errorf("inventory: ready=%v version=%q", rec.Ready, rec.KubernetesVersion)
		}
		if !containsStr(rec.ServedAPIs, "v1") || !containsStr(rec.ServedAPIs, "apps/v1") || !containsStr(rec.ServedAPIs, "example.com/v1") {
			return fmt.Errorf("served APIs %v", rec.ServedAPIs)
		}
		var cm *inventory.ResourceState
		for i, r := range rec.Resources {
			if r.Resource == "configmaps" {
				cm = &rec.Resources[i]
			}
		}
		if cm == nil || !cm.Synced || cm.ObjectCount != 1 {
			return fmt.Errorf("configmaps state %+v", cm)
		}
		if rec.Counters == nil || rec.Counters.Upserts == 0 {
			return fmt.Errorf("counters %+v", rec.Counters)
		}
		return nil
	})
}

// deletedWhileDown kills kr, deletes r3 and starts kr again: Widgets get a
// RESOURCE_REMOVED control event and are purged; ConfigMaps stay synced.
func (rr *registryRun) deletedWhileDown(t *testing.T) {
	ctx := context.Background()
	ce, c, e, cl, p := rr.ce, rr.c, rr.e, rr.cl, rr.p
	// A registry deleted while the collector is down: the restarted
	// collector removes the resource (control event, then purge).
	p.Kill()
	if err := e.Registries.Delete(ctx, "r3"); err != nil {
		t.Fatal(err)
	}
	p = ce.Start(t, cl, e.URL)
	fixture.Eventually(t, 60*time.Second, func() error {
		typ, _, err := fixture.LastControl(ctx, e.JS, cl, widgetsGVR)
		if err != nil {
			return err
		}
		if typ != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			return fmt.Errorf("last widgets control event %s", typ)
		}
		st, err := streamState(ctx, e.JS, cl, widgetsGVR)
		if err != nil {
			return err
		}
		if len(st) != 0 {
			return fmt.Errorf("%d widget subjects left", len(st))
		}
		return nil
	})
	waitConverged(t, e, c, cl, configMapsGVR, 0, p, "rega")
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
