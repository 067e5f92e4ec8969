package resume

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"

	"github.com/fleetview/fleetview/integration/fixture"
)

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
	bin := fixture.BuildFleetview(t)
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1")
	const ns = "churn"
	fixture.CreateNS(t, ctx, fleet, ns)
	c1 := fleet.Cluster("member1").Clientset()
	var next atomic.Int64
	live := fixture.CreateChurnPods(t, ctx, c1, ns, 8, &next)

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	grpcAddr, httpAddr := fixture.FreeAddr(t), fixture.FreeAddr(t)
	_, natsPort := fixture.FreePort(t)
	args := []string{"--kubeconfig", kc, "--context", "member1", "--state-dir", stateDir,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--nats-port", strconv.Itoa(natsPort)}
	logf := fixture.ProcessLog(t, "up.log")
	rest0 := "http://" + httpAddr
	ready := func(p *fixture.Proc) {
		t.Helper()
		fixture.Eventually(t, 60*time.Second, func() error {
			p.Running(t)
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

	fv := fixture.StartUpProc(t, bin, args, logf)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	regs := fleetviewv1.NewRegistryServiceClient(conn)
	fixture.Eventually(t, 60*time.Second, func() error {
		fv.Running(t)
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
	typedRec, dynRec := &fixture.Recorder{}, &fixture.Recorder{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: view, WrapTransport: typedRec.Wrap})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: view, WrapTransport: dynRec.Wrap})
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
		rec  *fixture.Recorder
	}
	infs := []informer{{"typed", typedInf, typedRec}, {"dynamic", dynInf, dynRec}}
	// The recorder sees the initial sync (a list or a streaming list):
	// "no list after the restart" below is then a real observation.
	for _, in := range infs {
		if !slices.ContainsFunc(in.rec.Since(0), func(c fixture.APICall) bool { return c.List() && c.Status == http.StatusOK }) {
			t.Fatalf("%s informer: no initial list recorded:%s", in.name, fixture.Dump(in.rec.Since(0)))
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
	fixture.Eventually(t, 30*time.Second, equal)
	if _, ok := typedInf.GetStore().List()[0].(*corev1.Pod); !ok {
		t.Fatalf("typed informer holds %T", typedInf.GetStore().List()[0])
	}

	// down stops fleetview while pods churn, waits until both informers
	// tried to re-watch the dead server (their resourceVersion is then
	// final) and until the member changed while fleetview was down, for
	// at least minDown; it returns the record marks and the versions the
	// informers held.
	down := func(ch *fixture.PodChurn, minDown time.Duration, stop func(*testing.T)) (marks []int, rvs []string) {
		t.Helper()
		fixture.Eventually(t, 30*time.Second, func() error { return ch.AtLeast(fixture.ChurnCounts{}, 5) })
		for _, in := range infs {
			marks = append(marks, in.rec.Len())
		}
		stop(t)
		killed, at := ch.Counts(), time.Now()
		atKill, err := member()
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range infs {
			var rv string
			fixture.Eventually(t, 30*time.Second, func() error {
				for _, c := range in.rec.Since(marks[i]) {
					if c.Watch && c.Err != "" {
						rv = c.RV
						return nil
					}
				}
				return fmt.Errorf("%s informer has not re-watched the killed fleetview:%s", in.name, fixture.Dump(in.rec.Since(marks[i])))
			})
			if rv == "" || rv != in.inf.LastSyncResourceVersion() {
				t.Fatalf("%s informer re-watched from %q, holds %q", in.name, rv, in.inf.LastSyncResourceVersion())
			}
			rvs = append(rvs, rv)
		}
		fixture.Eventually(t, 30*time.Second, func() error {
			if d := time.Since(at); d < minDown {
				return fmt.Errorf("down for %s of %s", d, minDown)
			}
			if err := ch.AtLeast(killed, 3); err != nil {
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
	afterRestart := func(ch *fixture.PodChurn) {
		t.Helper()
		restarted := ch.Counts()
		fixture.Eventually(t, 30*time.Second, func() error { fv.Running(t); return ch.AtLeast(restarted, 5) })
		live = ch.Stop(t)
		fixture.Eventually(t, 60*time.Second, equal)
	}

	// Phase 1: restarted promptly, the informers resume their watches,
	// after a kill -9 and after a graceful stop alike (a stopping
	// fleetview ends Kubernetes watches as kube-apiserver does, without an
	// ERROR event that would make reflectors list again).
	for _, stop := range []struct {
		name string
		do   func(*testing.T)
	}{{"kill -9", func(t *testing.T) { fv.Kill9(t) }}, {"SIGTERM", func(t *testing.T) { fv.Stop(t) }}} {
		start := time.Now()
		ch := fixture.StartPodChurn(c1, ns, live, &next)
		marks, rvs := down(ch, 0, stop.do)
		fv = fixture.StartUpProc(t, bin, args, logf)
		afterRestart(ch)
		t.Logf("phase 1 (%s): down, restarted and equal again in %s", stop.name, time.Since(start).Round(time.Millisecond))
		for i, in := range infs {
			calls := in.rec.Since(marks[i])
			var resumed *fixture.APICall
			for _, c := range calls {
				if c.List() {
					t.Fatalf("%s informer listed again after the restart (%s):%s", in.name, stop.name, fixture.Dump(calls))
				}
				if c.Expired() {
					t.Fatalf("%s informer got 410 after the restart (%s):%s", in.name, stop.name, fixture.Dump(calls))
				}
				if resumed == nil && c.Status == http.StatusOK {
					resumed = &c
				}
			}
			if resumed == nil || resumed.RV != rvs[i] {
				t.Fatalf("%s informer: want its first answered request a watch from the version it held (%s):%s", in.name, fixture.ShortRV(rvs[i]), fixture.Dump(calls))
			}
			t.Logf("%s informer after %s:%s", in.name, stop.name, fixture.Dump(calls))
		}
	}

	// Phase 2: down past the resume window, the informers get 410 and
	// list again.
	{
		start := time.Now()
		const window = 2 * time.Second
		ch := fixture.StartPodChurn(c1, ns, live, &next)
		// The versions the informers hold were issued before the kill:
		// down for the window and a second (versions carry whole seconds),
		// each is older than the window when fleetview answers again.
		marks, rvs := down(ch, window+time.Second, func(t *testing.T) { fv.Kill9(t) })
		fv = fixture.StartUpProc(t, bin, append(slices.Clone(args), "--max-resume-age", window.String()), logf)
		afterRestart(ch)
		t.Logf("phase 2: down, restarted and equal again in %s", time.Since(start).Round(time.Millisecond))
		for i, in := range infs {
			calls := in.rec.Since(marks[i])
			gone := slices.IndexFunc(calls, func(c fixture.APICall) bool { return c.Watch && c.RV != "" && c.Expired() })
			if gone < 0 || calls[gone].RV != rvs[i] {
				t.Fatalf("%s informer: want a watch from the version it held (%s) answered 410:%s", in.name, fixture.ShortRV(rvs[i]), fixture.Dump(calls))
			}
			if !slices.ContainsFunc(calls[gone+1:], func(c fixture.APICall) bool { return c.List() && c.Status == http.StatusOK }) {
				t.Fatalf("%s informer: no list after the 410:%s", in.name, fixture.Dump(calls))
			}
			t.Logf("%s informer after the second kill:%s", in.name, fixture.Dump(calls))
		}
	}
	fv.Stop(t)
}
