package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// BenchmarkCollectorInitialSync measures the initial sync of many realistic
// Pods (FLEETVIEW_BENCH_PODS, default 100000), created through a real
// kube-apiserver, by a `fleetview collector` child process into an embedded
// JetStream: objects/s from process start to the SYNCED marker, and the
// collector's peak RSS (VmHWM). In the same run, as baselines, each a child
// process with its own peak RSS: a paged list of the same Pods read as bytes
// (the apiserver's ceiling), the same list decoded by the dynamic client, and
// a client-go dynamic informer (what karmada-search runs); and a collector
// restart, which must republish nothing. Then the same Pods through the
// whole pipeline into one hub and into a three-member cluster
// (benchScaleOut).
//
//	go test -run '^$' -bench CollectorInitialSync -benchtime 1x -timeout 60m ./integration/bench/
func BenchmarkCollectorInitialSync(b *testing.B) {
	n := 100000
	if v := os.Getenv("FLEETVIEW_BENCH_PODS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("FLEETVIEW_BENCH_PODS=%q: want a positive integer", v)
		}
	}
	ctx := context.Background()
	dir := b.TempDir()
	bin := fixture.BuildFleetview(b) // the integration tests' build, linked once per checkout
	baseline := buildBinary(b, dir, fixture.RepoPath(b, "integration", "cmd", "collector-baseline"), "collector-baseline")

	sctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	fleet, err := harness.Start(sctx, harness.Options{Clusters: []string{"bench"}})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Stop()
	c := fleet.Cluster("bench")
	if err := c.GrantCollectorReadAll(sctx); err != nil {
		b.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kc, "collector"); err != nil {
		b.Fatal(err)
	}

	began := time.Now()
	if err := storePods(ctx, c, n, 4); err != nil {
		b.Fatal(err)
	}
	createSecs := time.Since(began).Seconds()
	b.Logf("stored %d pods in etcd in %.1fs (%.0f/s), listed by the apiserver", n, createSecs, float64(n)/createSecs)

	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(dir, "nats"), Port: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	regs, err := regstore.Open(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	reg := fixture.RegistryFor("bench", []string{"bench"}, fixture.Sel("v1", "Pod", ""))
	reg.APIVersion, reg.Kind = registry.APIVersion, registry.Kind
	if _, err := regs.Apply(ctx, reg); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	run := func(label string, after uint64) (secs, hwm float64, seq uint64) {
		// FLEETVIEW_BENCH_COLLECTOR_ARGS adds flags (e.g. --page-size, or
		// --metrics-addr to take a profile at /debug/pprof/).
		args := append([]string{"collector", "--cluster", "bench", "--kubeconfig", kc, "--context", "bench", "--nats-url", ns.ClientURL()},
			strings.Fields(os.Getenv("FLEETVIEW_BENCH_COLLECTOR_ARGS"))...)
		cmd := exec.Command(bin, args...)
		logf, err := os.Create(filepath.Join(dir, label+".log"))
		if err != nil {
			b.Fatal(err)
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}()
		deadline := time.Now().Add(30 * time.Minute)
		for {
			select {
			case <-exited:
				b.Fatalf("%s: collector exited; see %s", label, logf.Name())
			default:
			}
			typ, s, err := fixture.LastControl(ctx, js, "bench", benchdata.PodGVR)
			if err == nil && typ == fleetviewv1.EventType_EVENT_TYPE_SYNCED && s > after {
				secs = time.Since(start).Seconds()
				hwm = procKB(cmd.Process.Pid, "VmHWM") / 1024
				return secs, hwm, s
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: not synced after 30m", label)
			}
			time.Sleep(100 * time.Millisecond) // polling interval
		}
	}
	secs, hwm, syncSeq := run("initial", 0)
	b.StopTimer()
	st, err := js.Stream(ctx, stream.StreamName("bench"))
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if info.State.Msgs != uint64(n)+1 {
		b.Fatalf("stream holds %d messages, want %d pods + 1 marker", info.State.Msgs, n)
	}
	b.Logf("collector initial sync: %d pods in %.2fs = %.0f objects/s; collector peak RSS %.1f MB; stream %.1f MB (%.0f B/message)",
		n, secs, float64(n)/secs, hwm, float64(info.State.Bytes)/(1<<20), float64(info.State.Bytes)/float64(info.State.Msgs))
	b.ReportMetric(float64(n)/secs, "objects/s")
	b.ReportMetric(hwm, "peak-RSS-MB")

	rsecs, rhwm, rseq := run("restart", syncSeq)
	b.Logf("collector restart: hydrate %d from stream headers + relist + reconcile in %.2fs, republished %d messages (want 1: the SYNCED marker); peak RSS %.1f MB",
		n, rsecs, rseq-syncSeq, rhwm)
	b.ReportMetric(rsecs, "restart-s")
	b.ReportMetric(rhwm, "restart-peak-RSS-MB")
	if rseq-syncSeq != 1 {
		b.Errorf("restart republished %d messages, want only the SYNCED marker", rseq-syncSeq-1)
	}

	for _, mode := range []string{"raw", "raw-table", "list", "informer"} {
		out, err := exec.Command(baseline, "--kubeconfig", kc, "--context", "bench", "--mode", mode).CombinedOutput()
		if err != nil {
			b.Fatalf("baseline %s: %v\n%s", mode, err, out)
		}
		line := strings.TrimSpace(string(out))
		b.Logf("baseline %s", line)
		f := map[string]float64{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				f[k] = x
			}
		}
		b.ReportMetric(f["objects_per_second"], mode+"-objects/s")
		b.ReportMetric(f["peak_rss_mb"], mode+"-peak-RSS-MB")
	}
	b.Logf("kube-apiserver RSS %.0f MB with %d pods", procKB(c.PID(), "VmRSS")/1024, n)

	benchScaleOut(b, bin, kc, n)
}

// buildBinary builds a main package once into dir.
func buildBinary(tb testing.TB, dir, pkg, name string) string {
	tb.Helper()
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func procKB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.ParseFloat(strings.Fields(strings.TrimPrefix(l, field+":"))[0], 64)
			return kb
		}
	}
	return -1
}

// benchPod is pod i of the materializer benchmarks' realistic shape (about
// 3 KB), minus what the apiserver assigns itself.
func benchPod(i int) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	if err := json.Unmarshal(benchdata.Pod("bench", i, 1), p); err != nil {
		return nil, err
	}
	p.UID, p.ResourceVersion, p.CreationTimestamp, p.Generation = "", "", metav1.Time{}, 0
	delete(p.Annotations, "fleetview.io/cluster")
	delete(p.Annotations, "resource.karmada.io/cached-from-cluster")
	p.Annotations["checksum/config"] = fmt.Sprintf("%064x", i*2654435761)
	return p, nil
}

func storePods(ctx context.Context, c *harness.Cluster, n, workers int) error {
	cs := c.Clientset()
	for i := range 50 {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchdata.Namespace(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return c.StorePods(ctx, n, workers, func(i int) (*corev1.Pod, error) {
		p, err := benchPod(i)
		if err == nil {
			harness.DefaultPod(p)
		}
		return p, err
	})
}
