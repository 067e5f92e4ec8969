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
//	FV_BENCH_ONLY=history (instead of steps 2-6: history on vs off, issue #48: serve with --history-retention 0 and with the
//	defaults, alternating, FV_BENCH_REPEAT times each, into fresh stores: the adds, then an update of every object; history.go)
//	FV_BENCH_ONLY=history-churn (instead of steps 2-6: issue #48's own workload, churn.go: serve with history off and on,
//	alternating FV_BENCH_REPEAT (1) times each, catches up with the streams, then takes FV_BENCH_CHURN_RATE (1000) updates a
//	second for FV_BENCH_CHURN_SECONDS (600); the scale is FV_BENCH_EVENTS=150000 FV_BENCH_CLUSTERS=3)
//	FV_BENCH_AB=/path/to/other/fleetview (instead of steps 2-6: apply and replay of the same stream by FV_BENCH_BIN and this binary, alternating, FV_BENCH_AB_ROUNDS=3 times each; serve's CPU per event printed beside the rate; FV_BENCH_AB_REPLAY=0 skips the replay)
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
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
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

	if os.Getenv("FV_BENCH_ONLY") == "history" {
		repeat, err := envInt("FV_BENCH_REPEAT", 3)
		if err != nil || repeat == 0 {
			return fmt.Errorf("FV_BENCH_REPEAT: want a positive integer")
		}
		return benchHistory(ctx, js, ns.ClientURL(), work, bin, batch, n, k, repeat, uint64(n), 1)
	}
	if os.Getenv("FV_BENCH_ONLY") == "history-churn" {
		repeat, err := envInt("FV_BENCH_REPEAT", 1)
		if err != nil || repeat == 0 {
			return fmt.Errorf("FV_BENCH_REPEAT: want a positive integer")
		}
		rate, err := envInt("FV_BENCH_CHURN_RATE", 1000)
		if err != nil || rate == 0 {
			return fmt.Errorf("FV_BENCH_CHURN_RATE: want a positive integer (updates per second)")
		}
		secs, err := envInt("FV_BENCH_CHURN_SECONDS", 600)
		if err != nil || secs == 0 {
			return fmt.Errorf("FV_BENCH_CHURN_SECONDS: want a positive integer")
		}
		return benchHistoryChurn(ctx, js, ns.ClientURL(), work, bin, batch, n, k, repeat, rate, secs, uint64(n))
	}
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
		var err error
		if subjects[i], payloads[i], err = podMessage(i, k, rv); err != nil {
			return err
		}
		bytesTotal += len(payloads[i])
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

// podMessage is the subject and payload of Pod i at resourceVersion rv,
// in stream i % k (at rv > 1, one Pod in ten with its tier label changed).
func podMessage(i, k, rv int) (string, []byte, error) {
	cluster := clusterName(i % k)
	ev := benchdata.Event(cluster, i, rv)
	if rv > 1 && i%10 == 0 {
		ev.Object = bytes.Replace(ev.Object, []byte(`"tier":"`), []byte(`"tier":"v`+strconv.Itoa(rv)+`-`), 1)
	}
	b, err := stream.Encode(ev)
	if err != nil {
		return "", nil, err
	}
	return stream.ObjectSubject(cluster, benchdata.PodGVR, ev.GetUid()), b, nil
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
