// Command bench-materializer measures the materializer against the raw
// JetStream rate of the same payloads, in one run:
//
//  1. publish N realistic Pod events (~3 KB, one subject each, async) into
//     an embedded file-storage JetStream server: the raw publish rate;
//  2. `fleetview serve` (the real binary, a child process) applies the
//     pre-filled stream into Badger: apply rate, and its peak RSS (VmHWM)
//     holding N objects;
//  3. `fleetview rebuild` replays the stream into a fresh store: replay rate;
//  4. the OpenSearch sink (in this process) applies the first M events into
//     a real OpenSearch node: bulk apply rate;
//  5. every object is updated (one in ten relabeled) and serve applies the
//     updates to the store of step 3: update rate;
//  6. a replica's memory envelope, a serve replica and the all-in-one
//     `fleetview up` hub: FV_BENCH_ENVELOPE_PODS (145000) Pods ingested,
//     then a churn storm updating each, without a memory limit and with
//     --memory-limit FV_BENCH_ENVELOPE_LIMIT: steady and peak RSS
//     (FV_BENCH_ONLY=envelope runs this step alone).
//
// Scale comes from the environment (defaults: the issue's):
//
//	FV_BENCH_EVENTS=1000000 FV_BENCH_BATCH=1000 (events per Badger transaction) FV_BENCH_CLUSTERS=1 (events spread over that many
//	cluster streams, each consumed in parallel) FV_BENCH_OPENSEARCH_EVENTS=1000000
//	FV_BENCH_OPENSEARCH_HEAP_MB=1024 FV_BENCH_OPENSEARCH_BATCH=2000
//	FV_BENCH_PROFILE=cpu.prof, FV_BENCH_TRACE=serve.trace (3 s execution trace), FV_BENCH_PROFILE_SERVER=server-cpu.prof (this process: the NATS server), FV_BENCH_PROFILE_AFTER=3 (seconds into ingest),
//	FV_BENCH_HEAP_PROFILE=heap.prof (serve's heap once everything is applied)
//	FV_BENCH_AB=/path/to/other/fleetview (instead of steps 2-6: apply and replay of the same stream by FV_BENCH_BIN and this binary, alternating, FV_BENCH_AB_ROUNDS=3 times each)
//	FV_BENCH_CGROUP_MB=850 (memory limit of the second serve run, in a memory cgroup; 0 skips that run)
//	FV_BENCH_REPEAT=3 (runs of each Badger apply and replay configuration; their median is printed)
//	FV_BENCH_OPENSEARCH_FULLTEXT_OBJECT=1 (index the object JSON too) FV_BENCH_OPENSEARCH_REFRESH=0 (no refresh per bulk)
//
// Run: go run ./integration/cmd/bench-materializer (or scripts/bench-materializer.sh).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/benchdata"
	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	"github.com/fleetview/fleetview/materializer/opensearch"
)

func main() {
	// Interrupted, it still stops its children and removes its files.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench-materializer:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

func clusterName(i int) string { return fmt.Sprintf("bench-%d", i) }

func run(ctx context.Context) error {
	n, err := envInt("FV_BENCH_EVENTS", 1_000_000)
	if err != nil {
		return err
	}
	osN, err := envInt("FV_BENCH_OPENSEARCH_EVENTS", n)
	if err != nil {
		return err
	}
	heap, err := envInt("FV_BENCH_OPENSEARCH_HEAP_MB", 1024)
	if err != nil {
		return err
	}
	osBatch, err := envInt("FV_BENCH_OPENSEARCH_BATCH", 2000)
	if err != nil {
		return err
	}
	batch, err := envInt("FV_BENCH_BATCH", 1000)
	if err != nil || batch == 0 {
		return fmt.Errorf("FV_BENCH_BATCH: want a positive integer")
	}
	k, err := envInt("FV_BENCH_CLUSTERS", 1)
	if err != nil || k == 0 {
		return fmt.Errorf("FV_BENCH_CLUSTERS: want a positive integer")
	}
	work, err := os.MkdirTemp("", "fleetview-bench-materializer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Printf("bench-materializer: %d Pod events in %d cluster stream(s), Badger batch %d, %d into OpenSearch; %d CPUs, load average %s\n", n, k, batch, osN, numCPU(), loadAvg())

	// FV_BENCH_BIN runs a given fleetview binary (A/B comparisons).
	bin := os.Getenv("FV_BENCH_BIN")
	if bin == "" {
		bin = filepath.Join(work, "fleetview")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/fleetview").CombinedOutput(); err != nil {
			return fmt.Errorf("go build (run from the repository root): %v\n%s", err, out)
		}
	}

	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(work, "nats"), Port: -1})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	for c := range k {
		if _, err := js.CreateOrUpdateStream(ctx, stream.StreamConfig(clusterName(c), 1, 0)); err != nil {
			return err
		}
	}

	envPods, err := envInt("FV_BENCH_ENVELOPE_PODS", 145_000)
	if err != nil {
		return err
	}
	envLimit := os.Getenv("FV_BENCH_ENVELOPE_LIMIT")
	if envLimit == "" {
		envLimit = defaultEnvelopeLimit
	}
	if os.Getenv("FV_BENCH_ONLY") == "envelope" {
		return benchEnvelope(ctx, js, bin, ns.ClientURL(), work, envPods, envLimit)
	}

	// 1. Raw JetStream publish of the pre-encoded payloads.
	if err := publish(js, n, k, 1, "jetstream publish (raw, async, file storage)"); err != nil {
		return err
	}
	// Each step starts with no dirty pages left by the one before: the
	// kernel throttles every writer once dirty pages pass a share of the
	// memory, and the publish alone leaves gigabytes of them.
	syncDisks()

	if other := os.Getenv("FV_BENCH_AB"); other != "" {
		return benchAB(ctx, ns.ClientURL(), work, bin, other, batch, n, k)
	}

	// Steps 2, 2b, 3 and 3b run this many times each: the machine is
	// shared, and its speed moves between runs by more than the margins
	// the targets leave. Each run is printed, then the median.
	repeat, err := envInt("FV_BENCH_REPEAT", 3)
	if err != nil || repeat == 0 {
		return fmt.Errorf("FV_BENCH_REPEAT: want a positive integer")
	}

	// 2. Badger through the real binary.
	state := filepath.Join(work, "state")
	sr, err := runServe(ctx, bin, ns.ClientURL(), state, batch, 0, n, k, "", true)
	if err != nil {
		return err
	}
	report("badger apply (fleetview serve, from process start)", n, sr.dur, "")
	if sr.fromFirst > 0 {
		report("badger apply (from first applied batch)", n, sr.fromFirst, "")
	}
	fmt.Printf("  %-55s %8.0f MiB peak (VmHWM); anonymous (heap etc.) peak %.0f MiB; at the end %.0f MiB of which %.0f MiB file-backed (mmapped Badger files, reclaimable page cache); holding %d objects\n",
		"materializer RSS (fleetview serve)", float64(sr.peakRSS)/1024, float64(sr.peakAnon)/1024, float64(sr.endRSS)/1024, float64(sr.endFile)/1024, n)
	applies, err := runAgain(repeat, work, sr.fromFirst, func(i int, state string) (time.Duration, error) {
		r, err := runServe(ctx, bin, ns.ClientURL(), state, batch, 0, n, k, "", false)
		if err == nil {
			report(fmt.Sprintf("badger apply, run %d of %d (from first batch)", i, repeat), n, r.fromFirst, fmt.Sprintf("VmHWM %.0f MiB", float64(r.peakRSS)/1024))
		}
		return r.fromFirst, err
	})
	if err != nil {
		return err
	}
	reportMedian("badger apply (from first batch)", n, applies)

	// 2b. Again into a fresh store, with serve's memory (heap and page
	// cache alike) limited by a memory cgroup, as a Kubernetes memory limit
	// does: what the RSS of step 2 counts as file-backed is cache the
	// kernel takes back.
	limitMB, err := envInt("FV_BENCH_CGROUP_MB", 850)
	if err != nil {
		return err
	}
	limited, err := inCgroups(repeat, limitMB, n, "badger apply, serve", func(cg string) (time.Duration, int64, int64, error) {
		lstate := filepath.Join(work, "state-limited")
		defer os.RemoveAll(lstate)
		r, err := runServe(ctx, bin, ns.ClientURL(), lstate, batch, 0, n, k, cg, false)
		return r.fromFirst, r.peakRSS, r.peakAnon, err
	})
	if err != nil {
		return err
	}
	reportMedian(fmt.Sprintf("badger apply in the %d MiB cgroup", limitMB), n, limited)

	// 3. Replay: rebuild into a fresh store.
	syncDisks()
	d, hwm, anon, err := runRebuild(ctx, bin, ns.ClientURL(), state, batch, "")
	if err != nil {
		return err
	}
	report("replay (fleetview rebuild into a fresh store)", n, d, "")
	fmt.Printf("  %-55s %8.0f MiB peak (VmHWM); anonymous peak %.0f MiB (materializer + Badger, no query API)\n", "rebuild RSS", float64(hwm)/1024, float64(anon)/1024)
	replays, err := runAgain(repeat, work, d, func(i int, state string) (time.Duration, error) {
		d, hwm, _, err := runRebuild(ctx, bin, ns.ClientURL(), state, batch, "")
		if err == nil {
			report(fmt.Sprintf("replay, run %d of %d", i, repeat), n, d, fmt.Sprintf("VmHWM %.0f MiB", float64(hwm)/1024))
		}
		return d, err
	})
	if err != nil {
		return err
	}
	reportMedian("replay", n, replays)

	// 3b. The replay again, in a memory cgroup like 2b.
	limited, err = inCgroups(repeat, limitMB, n, "replay, rebuild", func(cg string) (time.Duration, int64, int64, error) {
		lstate := filepath.Join(work, "state-limited")
		defer os.RemoveAll(lstate)
		return runRebuild(ctx, bin, ns.ClientURL(), lstate, batch, cg)
	})
	if err != nil {
		return err
	}
	reportMedian(fmt.Sprintf("replay in the %d MiB cgroup", limitMB), n, limited)

	// 4. OpenSearch.
	if osN > 0 {
		if err := benchOpenSearch(ctx, nc, k, osN, heap, osBatch); err != nil {
			return err
		}
	}

	// 5. Updates: every object again at the next resourceVersion, one in
	// ten with a changed label, applied by serve to the store rebuilt in
	// step 3. Unlike an add, an update reads the object's previous state
	// (its labels, for the label index and for watches), long after the
	// page cache dropped it. Last, because the stream then holds only the
	// updates (one message per subject).
	if err := publish(js, n, k, 2, "jetstream publish of updates (raw)"); err != nil {
		return err
	}
	syncDisks()
	ur, err := runServe(ctx, bin, ns.ClientURL(), state, batch, uint64(n), n, k, "", false)
	if err != nil {
		return err
	}
	report("badger update apply (serve, from first applied batch)", n, ur.fromFirst, fmt.Sprintf("peak RSS (VmHWM) %.0f MiB, anonymous %.0f MiB", float64(ur.peakRSS)/1024, float64(ur.peakAnon)/1024))

	// 6. A replica's memory envelope (last: it resets the streams).
	if envPods > 0 {
		return benchEnvelope(ctx, js, bin, ns.ClientURL(), work, envPods, envLimit)
	}
	return nil
}

// publish publishes n Pod events at resourceVersion rv over k cluster
// streams (at rv > 1, one in ten with its tier label changed) and reports
// the rate as what.
func publish(js jetstream.JetStream, n, k, rv int, what string) error {
	fmt.Printf("encoding %d events...\n", n)
	subjects, payloads := make([]string, n), make([][]byte, n)
	var bytesTotal int
	for i := range n {
		cluster := clusterName(i % k)
		ev := benchdata.Event(cluster, i, rv)
		if rv > 1 && i%10 == 0 {
			ev.Object = bytes.Replace(ev.Object, []byte(`"tier":"`), []byte(`"tier":"v`+strconv.Itoa(rv)+`-`), 1)
		}
		b, err := stream.Encode(ev)
		if err != nil {
			return err
		}
		subjects[i], payloads[i] = stream.ObjectSubject(cluster, benchdata.PodGVR, ev.GetUid()), b
		bytesTotal += len(b)
	}
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(subjects[i], payloads[i], jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		return errors.New("publish acks did not complete")
	}
	report(what, n, time.Since(start), fmt.Sprintf("avg payload %d B", bytesTotal/n))
	return nil
}

// benchOpenSearch applies the first osN events (of k streams) into a real
// OpenSearch node through the materializer's OpenSearch sink.
func benchOpenSearch(ctx context.Context, nc *nats.Conn, k, osN, heap, osBatch int) error {
	node, err := itos.Start(ctx, itos.Options{HeapMB: heap})
	if err != nil {
		return err
	}
	defer node.Stop()
	fullText, noRefresh := os.Getenv("FV_BENCH_OPENSEARCH_FULLTEXT_OBJECT") == "1", os.Getenv("FV_BENCH_OPENSEARCH_REFRESH") == "0"
	st, err := opensearch.Open(opensearch.Options{Addresses: []string{node.URL()}, FullTextObject: fullText, NoRefresh: noRefresh,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	perCluster := uint64(osN / k)
	limited := &limitSink{Sink: st, max: perCluster}
	m, err := materializer.New(materializer.Config{Name: "bench-opensearch", NATS: nc, Sink: limited, BatchSize: osBatch, FlushInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- m.Run(mctx) }()
	for osApplied(m, k) < perCluster*uint64(k) {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case err := <-done:
			cancel()
			return fmt.Errorf("opensearch materializer: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	osDur := time.Since(start)
	cancel()
	<-done
	report(fmt.Sprintf("opensearch apply (bulk %d, full-text object %v, refresh per bulk %v)", osBatch, fullText, !noRefresh), int(perCluster)*k, osDur, "")
	return nil
}

// limitSink stops the OpenSearch run after max events, so the figure is
// for exactly the events asked for.
type limitSink struct {
	materializer.Sink
	max uint64
}

func (l *limitSink) Apply(ctx context.Context, cluster string, evs []feed.Event, lastSeq uint64) error {
	if lastSeq > l.max {
		for i, e := range evs {
			if e.Seq > l.max {
				evs = evs[:i]
				break
			}
		}
	}
	return l.Sink.Apply(ctx, cluster, evs, lastSeq)
}

// inCgroup runs f (what, applying n events) in a new memory cgroup of limitMB
// and reports its rate and memory; without a writable memory cgroup it
// says so and measures nothing.
func inCgroup(limitMB, n int, what string, f func(cg string) (d time.Duration, hwm, anon int64, err error)) (time.Duration, error) {
	line := fmt.Sprintf("%s in a %d MiB memory cgroup", what, limitMB)
	if limitMB == 0 {
		fmt.Printf("  %-55s not measured: FV_BENCH_CGROUP_MB=0\n", what+" in a memory cgroup")
		return 0, nil
	}
	cg, err := newMemoryCgroup(int64(limitMB) << 20)
	if err != nil {
		fmt.Printf("  %-55s not measured: %v\n", line, err)
		return 0, nil
	}
	defer os.Remove(cg)
	d, hwm, anon, err := f(cg)
	if err != nil && oomKills(cg) > 0 {
		// Not enough memory at this limit is a result, not a failure of
		// the benchmark.
		fmt.Printf("  %-55s killed by the OOM killer at the limit (peak RSS %.0f MiB, anonymous %.0f MiB): %v\n", line, float64(hwm)/1024, float64(anon)/1024, err)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", line, err)
	}
	peak, err := cgroupPeak(cg)
	if err != nil {
		return 0, err
	}
	fmt.Printf("  %-55s %8.0f events/s  (%d in %s) peak RSS (VmHWM) %.0f MiB, anonymous %.0f MiB; cgroup peak (heap + page cache) %.0f MiB\n",
		line, float64(n)/d.Seconds(), n, d.Round(time.Millisecond), float64(hwm)/1024, float64(anon)/1024, float64(peak)/(1<<20))
	return d, nil
}

// runAgain completes a measurement whose first run took first: runs 2 to
// repeat of f, each into a fresh state directory, removed after.
func runAgain(repeat int, work string, first time.Duration, f func(i int, state string) (time.Duration, error)) ([]time.Duration, error) {
	ds := []time.Duration{first}
	for i := 2; i <= repeat; i++ {
		syncDisks()
		state := filepath.Join(work, "state-again")
		d, err := f(i, state)
		if err != nil {
			return nil, err
		}
		if err := os.RemoveAll(state); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// inCgroups runs inCgroup repeat times, each in a new cgroup, and returns
// the durations measured (none where no memory cgroup can be made).
func inCgroups(repeat, limitMB, n int, what string, f func(cg string) (time.Duration, int64, int64, error)) ([]time.Duration, error) {
	var ds []time.Duration
	for range repeat {
		syncDisks()
		d, err := inCgroup(limitMB, n, what, f)
		if err != nil || d == 0 {
			return ds, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// runRebuild runs fleetview rebuild on state until it exits (in cgroup,
// when set) and returns its wall time, peak RSS and peak anonymous RSS (KiB).
func runRebuild(ctx context.Context, bin, natsURL, state string, batch int, cgroup string) (time.Duration, int64, int64, error) {
	start := time.Now()
	rb := exec.CommandContext(ctx, bin, "rebuild", "--nats-url", natsURL, "--state-dir", state, "--progress", "none", "--batch-size", strconv.Itoa(batch))
	var rbOut strings.Builder
	rb.Stdout, rb.Stderr = &rbOut, &rbOut
	if err := rb.Start(); err != nil {
		return 0, 0, 0, err
	}
	if cgroup != "" {
		if err := joinCgroup(cgroup, rb.Process.Pid); err != nil {
			_ = rb.Process.Kill()
			_ = rb.Wait()
			return 0, 0, 0, err
		}
	}
	rbDone := make(chan error, 1)
	go func() { rbDone <- rb.Wait() }()
	var hwm, anon int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-rbDone:
			if err != nil {
				return 0, hwm, anon, fmt.Errorf("rebuild: %v\n%s", err, rbOut.String())
			}
			d := time.Since(start)
			// Part of the replay's time: Badger flushing its memtables.
			for _, line := range strings.Split(rbOut.String(), "\n") {
				if strings.Contains(line, "rebuilt store closed") {
					if _, took, ok := strings.Cut(line, "took="); ok {
						fmt.Printf("  (closing the rebuilt store: %s)\n", took)
					}
				}
			}
			return d, hwm, anon, nil
		case <-tick.C:
			hwm = max(hwm, vmHWM(rb.Process.Pid))
			anon = max(anon, procStatus(rb.Process.Pid, "RssAnon"))
		}
	}
}

// joinCgroup moves pid into the cgroup.
func joinCgroup(cgroup string, pid int) error {
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into %s: %w", pid, cgroup, err)
	}
	return nil
}

// serveRun is what one run of fleetview serve measured.
type serveRun struct {
	dur, fromFirst    time.Duration // from process start, from the first applied batch
	peakRSS, peakAnon int64         // KiB
	endRSS, endFile   int64         // KiB, once every event is applied
}

// runServe runs fleetview serve on state (whose store holds the streams
// through the sum of sequences from: 0 for a fresh one) until it applied the
// next n events of the k streams, then stops it. With cgroup set, the process
// is moved into that memory cgroup first; with profiles, the FV_BENCH_*
// profiles and traces are taken.
func runServe(ctx context.Context, bin, natsURL, state string, batch int, from uint64, n, k int, cgroup string, profiles bool) (serveRun, error) {
	var r serveRun
	metrics := freeAddr()
	serve := exec.CommandContext(ctx, bin, "serve", "--nats-url", natsURL, "--state-dir", state,
		"--grpc-addr", freeAddr(), "--http-addr", freeAddr(), "--metrics-addr", metrics, "--batch-size", strconv.Itoa(batch))
	serveLog, err := os.Create(state + ".log")
	if err != nil {
		return r, err
	}
	defer serveLog.Close()
	serve.Stdout, serve.Stderr = serveLog, serveLog
	start := time.Now()
	if err := serve.Start(); err != nil {
		return r, err
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	if cgroup != "" {
		if err := joinCgroup(cgroup, serve.Process.Pid); err != nil {
			return r, err
		}
	}
	var firstAt time.Time
	if profiles {
		takeProfiles(metrics)
	}
	for {
		a, err := applied(metrics, k)
		if err == nil && a > from && firstAt.IsZero() {
			firstAt = time.Now()
		}
		r.peakRSS = max(r.peakRSS, vmHWM(serve.Process.Pid))
		r.peakAnon = max(r.peakAnon, procStatus(serve.Process.Pid, "RssAnon"))
		if err == nil && a >= from+uint64(n) {
			break
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if time.Since(start) > 30*time.Minute {
			return r, fmt.Errorf("serve did not apply through %d in 30 minutes (applied %d; log %s.log)", from+uint64(n), a, state)
		}
		if !alive(serve.Process.Pid) {
			return r, fmt.Errorf("serve exited having applied through %d of %d (log %s.log)", a, from+uint64(n), state)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.dur = time.Since(start)
	if !firstAt.IsZero() {
		r.fromFirst = time.Since(firstAt)
	}
	r.peakRSS = max(r.peakRSS, vmHWM(serve.Process.Pid))
	r.endRSS = vmRSS(serve.Process.Pid)
	r.endFile = procStatus(serve.Process.Pid, "RssFile")
	if prof := os.Getenv("FV_BENCH_HEAP_PROFILE"); prof != "" && profiles {
		// What serve's heap holds with every object applied.
		if err := fetchTo("http://"+metrics+"/debug/pprof/heap?gc=1", prof); err != nil {
			fmt.Fprintln(os.Stderr, "heap profile:", err)
		}
	}
	return r, nil
}

// syncDisks writes dirty pages out and says how long it took.
func syncDisks() {
	start := time.Now()
	syscall.Sync()
	fmt.Printf("  (sync of dirty pages: %s)\n", time.Since(start).Round(time.Millisecond))
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// takeProfiles starts the profiles and traces the FV_BENCH_* variables ask
// for, of serve (at metrics) and of this process.
func takeProfiles(metrics string) {
	if prof := os.Getenv("FV_BENCH_PROFILE_SERVER"); prof != "" {
		// A CPU profile of this process (the NATS server) during ingest.
		go func() {
			after, _ := envInt("FV_BENCH_PROFILE_AFTER", 3)
			time.Sleep(time.Duration(after) * time.Second)
			f, err := os.Create(prof)
			if err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			time.Sleep(10 * time.Second)
			pprof.StopCPUProfile()
		}()
	}
	// A 10 s CPU profile and a 3 s execution trace (go tool trace
	// -pprof=sync|sched) of serve, FV_BENCH_PROFILE_AFTER seconds in.
	for env, path := range map[string]string{"FV_BENCH_PROFILE": "profile?seconds=10", "FV_BENCH_TRACE": "trace?seconds=3"} {
		if file := os.Getenv(env); file != "" {
			go func() {
				after, _ := envInt("FV_BENCH_PROFILE_AFTER", 3)
				time.Sleep(time.Duration(after) * time.Second)
				if err := fetchTo("http://"+metrics+"/debug/pprof/"+path, file); err != nil {
					fmt.Fprintln(os.Stderr, env+":", err)
				}
			}()
		}
	}
}

// newMemoryCgroup creates a memory cgroup (v1 or v2) under this process's
// own, limited to limit bytes, and returns its directory.
func newMemoryCgroup(limit int64) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile string
		switch {
		case parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			root := "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
				root = "/sys/fs/cgroup/unified"
			}
			ctrl, err := os.ReadFile(filepath.Join(root, parts[2], "cgroup.subtree_control"))
			if err != nil || !strings.Contains(string(ctrl), "memory") {
				continue // no memory controller delegated here
			}
			dir, limitFile = filepath.Join(root, parts[2]), "memory.max"
		default:
			continue
		}
		cg := filepath.Join(dir, fmt.Sprintf("fleetview-bench-%d", os.Getpid()))
		if err := os.Mkdir(cg, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(cg)
			return "", err
		}
		return cg, nil
	}
	return "", errors.New("no writable memory cgroup controller")
}

// oomKills is how many processes the OOM killer killed in the cgroup.
func oomKills(cg string) int {
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(cg, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return 0
}

// cgroupPeak is the cgroup's peak memory use (heap and page cache), bytes.
func cgroupPeak(cg string) (int64, error) {
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		if b, err := os.ReadFile(filepath.Join(cg, f)); err == nil {
			return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no peak memory figure in %s", cg)
}

// reportMedian prints the median of several runs of one measurement, with
// every run's rate (nothing for fewer than two runs).
func reportMedian(what string, n int, ds []time.Duration) {
	if len(ds) < 2 {
		return
	}
	rates := make([]float64, len(ds))
	each := make([]string, len(ds))
	for i, d := range ds {
		rates[i] = float64(n) / d.Seconds()
		each[i] = fmt.Sprintf("%.1fk/s %.1f s", rates[i]/1000, d.Seconds())
	}
	m := median(rates)
	fmt.Printf("  %-55s %8.0f events/s  (%.2f s for %d; runs: %s)\n", what+", median of "+strconv.Itoa(len(ds)), m, float64(n)/m, n, strings.Join(each, ", "))
}

func report(what string, n int, d time.Duration, extra string) {
	fmt.Printf("  %-55s %8.0f events/s  (%d in %v) %s\n", what, float64(n)/d.Seconds(), n, d.Round(time.Millisecond), extra)
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func osApplied(m *materializer.Materializer, k int) uint64 {
	var n uint64
	a := m.Applied()
	for c := range k {
		n += a[clusterName(c)]
	}
	return n
}

// applied sums the badger materializer's applied sequences (one message
// per subject, so sequence = events) over the clusters. The page is
// parsed, not matched as text: client_golang orders labels by name and
// writes large values in exponent form.
func applied(addr string, k int) (uint64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for c := range k {
		want[clusterName(c)] = true
	}
	var n uint64
	for _, m := range fams["fleetview_materializer_applied_sequence"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["materializer"] == "badger" && want[labels["cluster"]] {
			n += uint64(m.GetGauge().GetValue())
		}
	}
	return n, nil
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func vmHWM(pid int) int64 { return procStatus(pid, "VmHWM") }
func vmRSS(pid int) int64 { return procStatus(pid, "VmRSS") }

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// fetchTo saves the body of a GET to a file.
func fetchTo(url, path string) error {
	// serve may not listen yet: it opens Badger first.
	resp, err := http.Get(url)
	for try := 0; errors.Is(err, syscall.ECONNREFUSED) && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		resp, err = http.Get(url)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchAB applies and replays the same pre-filled stream with two fleetview
// binaries in turn, so that both see the same stream and, alternating, the
// same machine: on a shared machine whose speed drifts by more than the
// difference sought, runs minutes apart compare nothing.
func benchAB(ctx context.Context, url, work, a, b string, batch, n, k int) error {
	rounds, err := envInt("FV_BENCH_AB_ROUNDS", 3)
	if err != nil {
		return err
	}
	type result struct{ apply, replay []float64 }
	res := map[string]*result{a: {}, b: {}}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	for r := range rounds {
		for _, bin := range []string{a, b} {
			state := filepath.Join(work, "ab-state")
			syncDisks()
			sr, err := runServe(ctx, bin, url, state, batch, 0, n, k, "", false)
			if err != nil {
				return err
			}
			if err := os.RemoveAll(state); err != nil {
				return err
			}
			syncDisks()
			d, _, _, err := runRebuild(ctx, bin, url, state, batch, "")
			if err != nil {
				return err
			}
			if err := os.RemoveAll(state); err != nil {
				return err
			}
			res[bin].apply = append(res[bin].apply, rate(sr.fromFirst))
			res[bin].replay = append(res[bin].replay, d.Seconds())
			fmt.Printf("  round %d %-40s apply %6.0f events/s (VmHWM %4.0f MiB)  replay %6.2f s\n", r+1, bin, rate(sr.fromFirst), float64(sr.peakRSS)/1024, d.Seconds())
		}
	}
	for _, bin := range []string{a, b} {
		fmt.Printf("  median %-41s apply %6.0f events/s  replay %6.2f s\n", bin, median(res[bin].apply), median(res[bin].replay))
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 0:
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
